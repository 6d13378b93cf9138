fn main() {
    eprintln!("inplace-daemon: not built yet (issue 5)");
    std::process::exit(1);
}
