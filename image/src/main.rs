//! `meridian-image`: one OCI image archive from a binary and the extracted Debian packages of
//! the base (`scripts/images.sh` runs it for the hub and the agent). Prints the image's
//! reference and digest.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use meridian_image::{CA_BUNDLE, Entry, ImageSpec, base_entries, image, layer, oci_archive};

#[derive(Debug, Parser)]
#[command(name = "meridian-image", about)]
struct Args {
    /// The binary the image runs, installed as /usr/local/bin/<its file name>.
    #[arg(long)]
    binary: PathBuf,
    /// The Debian packages of the base, extracted into one directory (`dpkg-deb -x`).
    #[arg(long)]
    base: PathBuf,
    /// Repository, e.g. ghcr.io/meridian-dev/meridian-hub.
    #[arg(long)]
    repository: String,
    #[arg(long)]
    tag: String,
    /// `org.opencontainers.image.version`.
    #[arg(long)]
    version: String,
    /// `org.opencontainers.image.revision`: the commit.
    #[arg(long)]
    revision: String,
    /// `org.opencontainers.image.source`.
    #[arg(long)]
    source: String,
    /// Seconds since 1970 for every time in the image: the commit's time.
    #[arg(long, env = "SOURCE_DATE_EPOCH")]
    epoch: u64,
    /// The OCI archive to write.
    #[arg(long)]
    out: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let name = args
        .binary
        .file_name()
        .context("the binary has no file name")?
        .to_string_lossy()
        .into_owned();
    let program = format!("usr/local/bin/{name}");
    let binary = std::fs::read(&args.binary)
        .with_context(|| format!("reading {}", args.binary.display()))?;
    let base = layer(&base_entries(&args.base)?, args.epoch)?;
    let own = layer(&[Entry::file(&program, 0o755, binary)], args.epoch)?;
    let annotations: BTreeMap<String, String> = [
        ("org.opencontainers.image.title", name.clone()),
        ("org.opencontainers.image.version", args.version),
        ("org.opencontainers.image.revision", args.revision),
        ("org.opencontainers.image.source", args.source),
        ("org.opencontainers.image.licenses", "Apache-2.0".into()),
        (
            "org.opencontainers.image.base.name",
            "debian:bookworm (libc6, libgcc-s1, gcc-12-base, ca-certificates)".into(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let spec = ImageSpec {
        repository: args.repository,
        tag: args.tag,
        entrypoint: vec![format!("/{program}")],
        env: vec![
            "PATH=/usr/local/bin".into(),
            format!("SSL_CERT_FILE=/{CA_BUNDLE}"),
        ],
        annotations,
        epoch: args.epoch,
    };
    let image = image(&spec, vec![base, own])?;
    let archive = oci_archive(&image, args.epoch)?;
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, &archive)
        .with_context(|| format!("writing {}", args.out.display()))?;
    let size: usize = image.layers.iter().map(|l| l.gzipped.len()).sum();
    println!("{} {} {}", image.reference, image.digest(), size);
    Ok(())
}
