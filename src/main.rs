fn main() {
    std::process::exit(kubegate::cli_main());
}
