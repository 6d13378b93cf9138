//! `kubectl-inplace`: the kubectl plugin (`kubectl inplace plan …` from PATH). All logic is
//! in [`inplace_controller::cli`].

fn main() {
    let code = inplace_controller::cli::run(
        std::env::args_os(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
