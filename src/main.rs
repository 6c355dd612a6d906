fn main() -> std::process::ExitCode {
    deltabench::cli::main()
}
