//! `crdgen`: prints Meridian's CRDs as YAML, or writes them into a directory (`crds/`).

use std::path::PathBuf;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "crdgen",
    about = "Print or write Meridian's CustomResourceDefinitions"
)]
struct Args {
    /// Write one file per CRD into this directory (removing ones no longer generated) instead
    /// of printing them.
    #[arg(long)]
    out_dir: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.out_dir {
        Some(dir) => {
            for name in meridian_api::crds::write_all(&dir)? {
                println!("wrote {}", dir.join(name).display());
            }
        }
        None => {
            for crd in meridian_api::crds::served_crds() {
                print!("---\n{}", meridian_api::crds::render(&crd)?);
            }
        }
    }
    Ok(())
}
