//! The `deltabench` command: everything it does is in the library's `cli` module.

fn main() -> std::process::ExitCode {
    deltabench::cli::main()
}
