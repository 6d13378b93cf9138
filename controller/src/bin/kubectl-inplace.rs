fn main() {
    eprintln!("kubectl-inplace: not built yet");
    std::process::exit(1);
}
