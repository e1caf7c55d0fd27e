//! `meridian-testbed`: starts the test bed by hand (`make demo` runs `meridian-testbed demo`).

fn main() -> anyhow::Result<()> {
    meridian_e2e::cli::Cli::parse_and_run()
}
