//! The images `make images` built (`target/images/`), for tests that run Meridian as pods; or
//! those [`IMAGES_DIR_ENV`] names (`make test` builds them from its own debug binaries into
//! `target/test-images/`, see `scripts/images.sh --test-build`).

use std::path::PathBuf;

use crate::{Error, repository_root};

/// One image: what `target/images/digests.txt` says of it, and its archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltImage {
    /// `registry/repository:tag`.
    pub reference: String,
    /// The manifest's digest, `sha256:…`.
    pub digest: String,
    /// Compressed size of the layers, in bytes.
    pub size: u64,
    /// The OCI archive `ctr images import` reads.
    pub archive: PathBuf,
}

impl BuiltImage {
    /// The reference's tag.
    pub fn tag(&self) -> &str {
        self.reference.rsplit_once(':').map_or("", |(_, tag)| tag)
    }

    /// The reference without its tag.
    pub fn repository(&self) -> &str {
        self.reference
            .rsplit_once(':')
            .map_or(&self.reference, |(repository, _)| repository)
    }
}

/// The image of `images` whose repository ends with `name` (`/meridian-hub`); panics naming
/// it when `make images` did not build it.
pub fn image_named(images: &[BuiltImage], name: &str) -> BuiltImage {
    images
        .iter()
        .find(|image| image.repository().ends_with(name))
        .cloned()
        .unwrap_or_else(|| panic!("make images built {name}"))
}

/// Meridian's hub and agent images of `images`.
pub fn hub_and_agent(images: &[BuiltImage]) -> (BuiltImage, BuiltImage) {
    (
        image_named(images, "/meridian-hub"),
        image_named(images, "/meridian-agent"),
    )
}

/// The lock `scripts/images.sh` holds while it builds, so a test waits for a build under way.
const BUILD_LOCK: &str = ".build.lock";

/// Environment variable naming the directory of the images to run instead of `target/images`
/// (relative to the repository's root, or absolute).
pub const IMAGES_DIR_ENV: &str = "MERIDIAN_IMAGES_DIR";

/// The images listed in `digests.txt` of `target/images` (or [`IMAGES_DIR_ENV`]), once a
/// build under way has finished; an error naming `make images` when there are none.
pub fn built_images() -> Result<Vec<BuiltImage>, Error> {
    let dir = repository_root().join(
        std::env::var_os(IMAGES_DIR_ENV).map_or_else(|| "target/images".into(), PathBuf::from),
    );
    wait_for_build(&dir);
    let digests = dir.join("digests.txt");
    let text = std::fs::read_to_string(&digests).map_err(|_| Error::MissingAsset {
        path: digests.clone(),
        hint: "Meridian's images (`make images` builds them; `make test` packs its own)",
    })?;
    let images = parse_digests(&text, &dir);
    if let Some(missing) = images.iter().find(|image| !image.archive.exists()) {
        return Err(Error::MissingAsset {
            path: missing.archive.clone(),
            hint: "Meridian's images (`make images` builds them)",
        });
    }
    Ok(images)
}

/// Blocks while `scripts/images.sh` holds its lock (a shared lock waits for the exclusive one).
/// No lock file means no build was ever started here; the digests then tell what there is.
fn wait_for_build(dir: &std::path::Path) {
    if let Ok(lock) = std::fs::File::open(dir.join(BUILD_LOCK)) {
        // An error here (a file system without locks) leaves only the digests to go by.
        let _ = lock.lock_shared();
    }
}

/// `reference digest size` lines; the archive is `<dir>/<name>-<tag>.oci.tar` (scripts/images.sh).
fn parse_digests(text: &str, dir: &std::path::Path) -> Vec<BuiltImage> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (reference, digest, size) = (fields.next()?, fields.next()?, fields.next()?);
            let (repository, tag) = reference.rsplit_once(':')?;
            let name = repository.rsplit('/').next()?;
            Some(BuiltImage {
                reference: reference.to_string(),
                digest: digest.to_string(),
                size: size.parse().ok()?,
                archive: dir.join(format!("{name}-{tag}.oci.tar")),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_file_names_references_digests_sizes_and_archives() {
        let text = "ghcr.io/meridian-dev/meridian-hub:0.1.0 sha256:ab 11800000\n\
                    ghcr.io/meridian-dev/meridian-agent:0.1.0 sha256:cd 12000000\n";
        let images = parse_digests(text, std::path::Path::new("/images"));
        assert_eq!(images.len(), 2);
        assert_eq!(images[0].repository(), "ghcr.io/meridian-dev/meridian-hub");
        assert_eq!(images[0].tag(), "0.1.0");
        assert_eq!(images[0].digest, "sha256:ab");
        assert_eq!(images[1].size, 12_000_000);
        assert_eq!(
            images[1].archive,
            std::path::Path::new("/images/meridian-agent-0.1.0.oci.tar")
        );
    }
}
