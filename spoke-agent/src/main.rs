fn main() -> anyhow::Result<()> {
    meridian_agent::Cli::parse_and_run()
}
