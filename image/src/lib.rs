//! OCI images of Meridian's binaries, built without a container engine.
//!
//! An image is two layers: a base of the runtime files the binaries need, taken from Debian
//! packages as distroless images are (the C library, libgcc, the CA bundle, their copyright
//! files, a `nonroot` user; no shell, no package manager), and the binary itself. Everything
//! is deterministic: entries sorted, one timestamp (the commit's), numeric owners only, gzip
//! without a name or time. The same inputs give the same digest on any machine.
//!
//! The output is an OCI image layout in one tar, which `ctr images import` reads; its index
//! names the image, so it is imported under that name.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The user images run as (distroless's `nonroot`).
pub const NONROOT: u32 = 65532;

/// The runtime files a glibc Rust binary needs, as the Debian packages lay them out.
const LIBRARIES: &[&str] = &[
    "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    "lib/x86_64-linux-gnu/libc.so.6",
    "lib/x86_64-linux-gnu/libgcc_s.so.1",
    "lib/x86_64-linux-gnu/libm.so.6",
];
/// The packages whose copyright files go along with the files taken from them: libgcc-s1's
/// is its source package's, shipped in gcc-12-base (libgcc-s1's doc directory is a link to it).
pub const PACKAGES: &[&str] = &["libc6", "gcc-12-base", "ca-certificates"];
/// Where the CA bundle is, as Debian and most TLS stacks expect it.
pub const CA_BUNDLE: &str = "etc/ssl/certs/ca-certificates.crt";

/// One entry of a layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Relative to the image root, without a leading `/`.
    pub path: String,
    pub kind: EntryKind,
    pub mode: u32,
    /// User and group.
    pub owner: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    Directory,
    File(Vec<u8>),
    Symlink(String),
}

impl Entry {
    pub fn file(path: &str, mode: u32, contents: Vec<u8>) -> Self {
        Entry {
            path: path.into(),
            kind: EntryKind::File(contents),
            mode,
            owner: 0,
        }
    }

    pub fn directory(path: &str, mode: u32, owner: u32) -> Self {
        Entry {
            path: path.into(),
            kind: EntryKind::Directory,
            mode,
            owner,
        }
    }

    pub fn symlink(path: &str, target: &str) -> Self {
        Entry {
            path: path.into(),
            kind: EntryKind::Symlink(target.into()),
            mode: 0o777,
            owner: 0,
        }
    }
}

/// A layer as the image holds it.
#[derive(Debug, Clone)]
pub struct Layer {
    pub gzipped: Vec<u8>,
    /// `sha256:` of the uncompressed tar (the config's `diff_ids`).
    pub diff_id: String,
    /// `sha256:` of the gzipped tar (the blob's name).
    pub digest: String,
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A deterministic layer: entries sorted by path, the parents they imply added (0755, root),
/// every time `epoch`, numeric owners only.
pub fn layer(entries: &[Entry], epoch: u64) -> anyhow::Result<Layer> {
    let mut by_path: BTreeMap<String, Entry> = BTreeMap::new();
    for entry in entries {
        let path = entry.path.trim_matches('/').to_string();
        anyhow::ensure!(!path.is_empty(), "an entry without a path");
        for ancestor in Path::new(&path).ancestors().skip(1) {
            let dir = ancestor.to_string_lossy().into_owned();
            if dir.is_empty() {
                break;
            }
            by_path
                .entry(dir.clone())
                .or_insert_with(|| Entry::directory(&dir, 0o755, 0));
        }
        // An entry given for a path replaces the directory another entry implied there.
        by_path.insert(
            path.clone(),
            Entry {
                path,
                ..entry.clone()
            },
        );
    }
    let uncompressed = deterministic_tar(by_path.values(), epoch)?;
    // No name and time zero in the gzip header, so the bytes depend on the tar alone.
    let mut gzip = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    gzip.write_all(&uncompressed)?;
    let gzipped = gzip.finish()?;
    Ok(Layer {
        diff_id: sha256(&uncompressed),
        digest: sha256(&gzipped),
        gzipped,
    })
}

/// The base layer's entries, from Debian packages extracted (`dpkg-deb -x`) into `root`.
pub fn base_entries(root: &Path) -> anyhow::Result<Vec<Entry>> {
    let read = |relative: &str| {
        std::fs::read(root.join(relative)).with_context(|| {
            format!(
                "{relative} is not in the extracted packages at {}",
                root.display()
            )
        })
    };
    let mut entries = Vec::new();
    for library in LIBRARIES {
        entries.push(Entry::file(library, 0o755, read(library)?));
    }
    // The interpreter path the binaries name.
    entries.push(Entry::symlink(
        "lib64/ld-linux-x86-64.so.2",
        "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    ));
    entries.push(Entry::file(CA_BUNDLE, 0o644, ca_bundle(root)?));
    for package in PACKAGES {
        let copyright = format!("usr/share/doc/{package}/copyright");
        entries.push(Entry::file(&copyright, 0o644, read(&copyright)?));
    }
    entries.push(Entry::file(
        "etc/passwd",
        0o644,
        format!(
            "root:x:0:0:root:/root:/sbin/nologin\n\
             nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n"
        )
        .into_bytes(),
    ));
    entries.push(Entry::file(
        "etc/group",
        0o644,
        format!("root:x:0:\nnonroot:x:{NONROOT}:\n").into_bytes(),
    ));
    entries.push(Entry::directory("tmp", 0o1777, 0));
    entries.push(Entry::directory("home/nonroot", 0o700, NONROOT));
    Ok(entries)
}

/// The certificates of the `ca-certificates` package in one PEM bundle, in name order (what
/// `update-ca-certificates` writes with every certificate enabled).
fn ca_bundle(root: &Path) -> anyhow::Result<Vec<u8>> {
    let dir = root.join("usr/share/ca-certificates");
    let mut certificates = Vec::new();
    let mut pending = vec![dir.clone()];
    while let Some(dir) = pending.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "crt") {
                certificates.push(path);
            }
        }
    }
    certificates.sort();
    if certificates.is_empty() {
        bail!("no certificates under {}", dir.display());
    }
    let mut bundle = Vec::new();
    for certificate in certificates {
        let mut pem = std::fs::read(&certificate)?;
        if !pem.ends_with(b"\n") {
            pem.push(b'\n');
        }
        bundle.extend(pem);
    }
    Ok(bundle)
}

/// What an image is besides its layers.
#[derive(Debug, Clone)]
pub struct ImageSpec {
    /// Repository, e.g. `ghcr.io/meridian-dev/meridian-hub`.
    pub repository: String,
    pub tag: String,
    pub entrypoint: Vec<String>,
    pub env: Vec<String>,
    /// OCI annotations (`org.opencontainers.image.*`), also the config's labels.
    pub annotations: BTreeMap<String, String>,
    /// Seconds since 1970: the commit's time.
    pub epoch: u64,
}

/// An image: its config, its manifest, and the layers they name.
#[derive(Debug, Clone)]
pub struct Image {
    pub config: Vec<u8>,
    pub manifest: Vec<u8>,
    pub layers: Vec<Layer>,
    pub reference: String,
}

impl Image {
    /// The manifest's digest: what a manifest pins (`repository@digest`).
    pub fn digest(&self) -> String {
        sha256(&self.manifest)
    }
}

fn rfc3339(epoch: u64) -> anyhow::Result<String> {
    let time = jiff::Timestamp::from_second(i64::try_from(epoch)?)?;
    Ok(time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// The config and manifest of an image of `layers`, bottom first.
pub fn image(spec: &ImageSpec, layers: Vec<Layer>) -> anyhow::Result<Image> {
    let created = rfc3339(spec.epoch)?;
    let config = json!({
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": format!("{NONROOT}:{NONROOT}"),
            "Entrypoint": spec.entrypoint,
            "Env": spec.env,
            "WorkingDir": "/home/nonroot",
            "Labels": spec.annotations,
        },
        "rootfs": {
            "type": "layers",
            "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>(),
        },
    });
    let config = canonical(&config);
    let mut annotations = spec.annotations.clone();
    annotations.insert("org.opencontainers.image.created".into(), created);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": sha256(&config),
            "size": config.len(),
        },
        "layers": layers.iter().map(|l| json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": l.digest,
            "size": l.gzipped.len(),
        })).collect::<Vec<_>>(),
        "annotations": annotations,
    });
    Ok(Image {
        manifest: canonical(&manifest),
        config,
        layers,
        reference: format!("{}:{}", spec.repository, spec.tag),
    })
}

/// JSON with sorted keys and no spaces, so the digest depends on the content alone.
fn canonical(value: &Value) -> Vec<u8> {
    // serde_json's map is ordered by key (no `preserve_order` feature in this build).
    serde_json::to_vec(value).expect("JSON values serialize")
}

/// The image as an OCI image layout in one tar (what `ctr images import` reads). Its index
/// names the image twice: `org.opencontainers.image.ref.name` (the tag, per the OCI layout
/// spec) and `io.containerd.image.name` (the full reference containerd imports it under).
pub fn oci_archive(image: &Image, epoch: u64) -> anyhow::Result<Vec<u8>> {
    let tag = image
        .reference
        .rsplit_once(':')
        .map_or(image.reference.as_str(), |(_, tag)| tag);
    let index = canonical(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": image.digest(),
            "size": image.manifest.len(),
            "annotations": {
                "org.opencontainers.image.ref.name": tag,
                "io.containerd.image.name": image.reference,
            },
        }],
    }));
    let blob = |bytes: &[u8]| {
        let digest = sha256(bytes);
        let hex = digest.trim_start_matches("sha256:").to_string();
        Entry::file(&format!("blobs/sha256/{hex}"), 0o644, bytes.to_vec())
    };
    let mut entries = vec![
        Entry::file(
            "oci-layout",
            0o644,
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        Entry::file("index.json", 0o644, index),
        blob(&image.manifest),
        blob(&image.config),
    ];
    entries.extend(image.layers.iter().map(|l| blob(&l.gzipped)));
    let mut sorted = entries;
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    // A layer shared by two images, or an empty one, is one blob.
    sorted.dedup_by(|a, b| a.path == b.path);
    deterministic_tar(&sorted, epoch)
}

/// A tar of `entries` in the order given, every time `epoch`, numeric owners only: the same
/// entries give the same bytes.
fn deterministic_tar<'a>(
    entries: impl IntoIterator<Item = &'a Entry>,
    epoch: u64,
) -> anyhow::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = tar::Header::new_ustar();
        header.set_mtime(epoch);
        header.set_uid(entry.owner.into());
        header.set_gid(entry.owner.into());
        header.set_mode(entry.mode);
        match &entry.kind {
            EntryKind::Directory => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                tar.append_data(&mut header, format!("{}/", entry.path), std::io::empty())?;
            }
            EntryKind::File(contents) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(contents.len() as u64);
                tar.append_data(&mut header, &entry.path, contents.as_slice())?;
            }
            EntryKind::Symlink(target) => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                tar.append_link(&mut header, &entry.path, target)?;
            }
        }
    }
    Ok(tar.into_inner()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(epoch: u64) -> ImageSpec {
        ImageSpec {
            repository: "ghcr.io/meridian-dev/meridian-hub".into(),
            tag: "0.1.0".into(),
            entrypoint: vec!["/usr/local/bin/meridian-hub".into()],
            env: vec!["SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt".into()],
            annotations: [
                (
                    "org.opencontainers.image.version".to_string(),
                    "0.1.0".to_string(),
                ),
                (
                    "org.opencontainers.image.revision".to_string(),
                    "abc123".to_string(),
                ),
            ]
            .into(),
            epoch,
        }
    }

    fn binary_layer(epoch: u64) -> Layer {
        layer(
            &[Entry::file(
                "usr/local/bin/meridian-hub",
                0o755,
                b"\x7fELF not really".to_vec(),
            )],
            epoch,
        )
        .unwrap()
    }

    fn paths(layer: &Layer) -> Vec<(String, u64, u32, u64)> {
        let tar = flate2::read::GzDecoder::new(layer.gzipped.as_slice());
        let mut archive = tar::Archive::new(tar);
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    h.uid().unwrap(),
                    h.mode().unwrap(),
                    h.mtime().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn the_same_inputs_give_the_same_digest() {
        let one = image(&spec(1_700_000_000), vec![binary_layer(1_700_000_000)]).unwrap();
        let two = image(&spec(1_700_000_000), vec![binary_layer(1_700_000_000)]).unwrap();
        assert_eq!(one.digest(), two.digest());
        assert_eq!(
            oci_archive(&one, 1_700_000_000).unwrap(),
            oci_archive(&two, 1_700_000_000).unwrap()
        );
        let later = image(&spec(1_700_000_001), vec![binary_layer(1_700_000_001)]).unwrap();
        assert_ne!(one.digest(), later.digest(), "the time is an input");
    }

    #[test]
    fn entry_order_does_not_matter_and_parents_are_implied() {
        let a = Entry::file("etc/passwd", 0o644, b"x".to_vec());
        let b = Entry::directory("home/nonroot", 0o700, NONROOT);
        let one = layer(&[a.clone(), b.clone()], 7).unwrap();
        let two = layer(&[b, a], 7).unwrap();
        assert_eq!(one.digest, two.digest);
        assert_eq!(
            paths(&one),
            vec![
                ("etc/".to_string(), 0, 0o755, 7),
                ("etc/passwd".to_string(), 0, 0o644, 7),
                ("home/".to_string(), 0, 0o755, 7),
                ("home/nonroot/".to_string(), u64::from(NONROOT), 0o700, 7),
            ]
        );
    }

    #[test]
    fn the_config_runs_as_nonroot_and_carries_the_annotations() {
        let image = image(&spec(1_700_000_000), vec![binary_layer(1_700_000_000)]).unwrap();
        let config: Value = serde_json::from_slice(&image.config).unwrap();
        assert_eq!(config["config"]["User"], "65532:65532");
        assert_eq!(config["created"], "2023-11-14T22:13:20Z");
        assert_eq!(
            config["config"]["Labels"]["org.opencontainers.image.revision"],
            "abc123"
        );
        let manifest: Value = serde_json::from_slice(&image.manifest).unwrap();
        assert_eq!(manifest["config"]["digest"], sha256(&image.config).as_str());
        assert_eq!(
            manifest["annotations"]["org.opencontainers.image.created"],
            "2023-11-14T22:13:20Z"
        );
        assert_eq!(
            manifest["layers"][0]["digest"],
            image.layers[0].digest.as_str()
        );
    }

    #[test]
    fn the_archive_is_an_oci_layout_naming_the_image() {
        let image = image(&spec(1), vec![binary_layer(1)]).unwrap();
        let archive = oci_archive(&image, 1).unwrap();
        let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for entry in tar::Archive::new(archive.as_slice()).entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
            files.insert(path, bytes);
        }
        let index: Value = serde_json::from_slice(&files["index.json"]).unwrap();
        let named = &index["manifests"][0];
        assert_eq!(named["digest"], image.digest().as_str());
        assert_eq!(
            named["annotations"]["io.containerd.image.name"],
            "ghcr.io/meridian-dev/meridian-hub:0.1.0"
        );
        assert_eq!(
            named["annotations"]["org.opencontainers.image.ref.name"],
            "0.1.0"
        );
        // Every blob is stored under its own digest.
        for (path, bytes) in &files {
            if let Some(hex) = path.strip_prefix("blobs/sha256/") {
                assert_eq!(sha256(bytes), format!("sha256:{hex}"), "{path}");
            }
        }
        assert_eq!(
            files.keys().filter(|p| p.starts_with("blobs/")).count(),
            3,
            "manifest, config, one layer"
        );
    }

    #[test]
    fn the_base_has_what_a_binary_needs_and_no_shell() {
        let root = tempfile::tempdir().unwrap();
        let put = |relative: &str, contents: &str| {
            let path = root.path().join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        };
        for library in LIBRARIES {
            put(library, "library");
        }
        for package in PACKAGES {
            put(&format!("usr/share/doc/{package}/copyright"), "terms");
        }
        put("usr/share/ca-certificates/mozilla/B.crt", "-----B-----");
        put("usr/share/ca-certificates/mozilla/A.crt", "-----A-----\n");
        let entries = base_entries(root.path()).unwrap();
        let bundle = entries.iter().find(|e| e.path == CA_BUNDLE).unwrap();
        assert_eq!(
            bundle.kind,
            EntryKind::File(b"-----A-----\n-----B-----\n".to_vec()),
            "certificates in name order, each ending its line"
        );
        assert!(
            entries
                .iter()
                .any(|e| e.path == "lib64/ld-linux-x86-64.so.2")
        );
        assert!(
            !entries.iter().any(|e| e.path.ends_with("bin/sh")),
            "no shell"
        );
        let home = entries.iter().find(|e| e.path == "home/nonroot").unwrap();
        assert_eq!(home.owner, NONROOT);
        // A package that is missing a file is an error, not a thinner image.
        std::fs::remove_file(root.path().join(LIBRARIES[1])).unwrap();
        assert!(base_entries(root.path()).is_err());
    }
}
