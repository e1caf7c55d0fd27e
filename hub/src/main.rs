fn main() -> anyhow::Result<()> {
    meridian_hub::Cli::parse_and_run()
}
