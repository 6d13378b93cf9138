fn main() {
    eprintln!("inplace-nodesim: not built yet");
    std::process::exit(1);
}
