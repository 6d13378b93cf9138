fn main() {
    eprintln!("inplace-controller: not built yet (issue 4)");
    std::process::exit(1);
}
