//! No crate in Cargo.lock is yanked, unless allowed below with a reason. A yank is how a crate's
//! author says a release must not be used (a soundness bug, a broken build, a mistake), and cargo
//! keeps a locked yanked release without a word. This reads cargo's own cache of the crates.io
//! index, which every build of the workspace fills, so it asks no network; it is as fresh as
//! that cache, which cargo refreshes when it resolves (a `cargo update`, a changed manifest),
//! not on every `--locked` build: a release yanked since is found at the next. The rest of the
//! dependency check (licenses, duplicate majors, sources) is cargo-deny's, run by `make test`
//! (scripts/check-dependencies.sh, deny.toml).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Yanked releases allowed to stay locked: (crate, version, why). None today.
const ALLOWED_YANKED: &[(&str, &str, &str)] = &[];

const CRATES_IO: &str = "registry+https://github.com/rust-lang/crates.io-index";

/// One locked crate from crates.io.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Locked {
    name: String,
    version: String,
}

/// The crates.io packages of a Cargo.lock (its `[[package]]` tables: name, version, source).
fn locked_from_crates_io(lock: &str) -> Vec<Locked> {
    let mut locked = Vec::new();
    for table in lock.split("[[package]]").skip(1) {
        let field = |key: &str| -> Option<String> {
            table.lines().find_map(|line| {
                let value = line.strip_prefix(key)?.trim_start().strip_prefix('=')?;
                Some(value.trim().trim_matches('"').to_string())
            })
        };
        if field("source").as_deref() != Some(CRATES_IO) {
            continue;
        }
        if let (Some(name), Some(version)) = (field("name"), field("version")) {
            locked.push(Locked { name, version });
        }
    }
    locked
}

/// Where the index puts a crate's file: `1/a`, `2/ab`, `3/a/abc`, `ab/cd/abcd…` (lowercase).
fn index_path(name: &str) -> PathBuf {
    let name = name.to_ascii_lowercase();
    match name.len() {
        1 => PathBuf::from("1").join(&name),
        2 => PathBuf::from("2").join(&name),
        3 => PathBuf::from("3").join(&name[..1]).join(&name),
        _ => PathBuf::from(&name[..2]).join(&name[2..4]).join(&name),
    }
}

/// The versions a cached index file lists, and whether each is yanked. Cargo's cache format: a
/// byte of cache version, four of index version, then NUL-separated fields: the index file's
/// revision, and pairs of a version and its index line (JSON).
fn yanked_by_version(cache: &[u8]) -> Option<BTreeMap<String, bool>> {
    let mut fields = cache.get(5..)?.split(|byte| *byte == 0).skip(1);
    let mut versions = BTreeMap::new();
    while let (Some(version), Some(line)) = (fields.next(), fields.next()) {
        if version.is_empty() {
            break;
        }
        let entry: serde_json::Value = serde_json::from_slice(line).ok()?;
        let yanked = entry
            .get("yanked")
            .and_then(|y| y.as_bool())
            .unwrap_or(false);
        versions.insert(String::from_utf8_lossy(version).into_owned(), yanked);
    }
    Some(versions)
}

/// What the check finds for one locked crate.
#[derive(Debug, PartialEq, Eq)]
enum Finding {
    Yanked,
    /// The cache has no word on it (no index file cached, or not this version).
    Unknown,
}

/// The locked crates that are yanked or unknown to the cache, from the cache files' contents
/// (`cached`: a crate's name → its cache file, if any), less the allowed yanks.
fn findings(
    locked: &[Locked],
    cached: impl Fn(&str) -> Option<Vec<u8>>,
    allowed: &[(&str, &str, &str)],
) -> Vec<(Locked, Finding)> {
    let mut found = Vec::new();
    for krate in locked {
        let yanked = cached(&krate.name)
            .as_deref()
            .and_then(yanked_by_version)
            .and_then(|versions| versions.get(&krate.version).copied());
        let finding = match yanked {
            Some(false) => continue,
            Some(true) => Finding::Yanked,
            None => Finding::Unknown,
        };
        let allowed = allowed
            .iter()
            .any(|(name, version, _)| *name == krate.name && *version == krate.version);
        if !(allowed && finding == Finding::Yanked) {
            found.push((krate.clone(), finding));
        }
    }
    found
}

/// Cargo's index caches of crates.io (one per cargo's hash of the index URL).
fn index_caches() -> Vec<PathBuf> {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let Ok(entries) = std::fs::read_dir(cargo_home.join("registry/index")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("index.crates.io-"))
        })
        .map(|path| path.join(".cache"))
        .collect()
}

#[test]
fn no_locked_crate_is_yanked() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).expect("Cargo.lock");
    let locked = locked_from_crates_io(&lock);
    assert!(locked.len() > 100, "{} crates from crates.io", locked.len());
    let caches = index_caches();
    // The newest cache file of a crate wins (a cargo of another version may keep its own).
    let cached = |name: &str| -> Option<Vec<u8>> {
        caches
            .iter()
            .map(|cache| cache.join(index_path(name)))
            .filter_map(|path| Some((std::fs::metadata(&path).ok()?.modified().ok()?, path)))
            .max()
            .and_then(|(_, path)| std::fs::read(path).ok())
    };
    let found = findings(&locked, cached, ALLOWED_YANKED);
    let listed = |which: Finding| -> Vec<String> {
        found
            .iter()
            .filter(|(_, finding)| *finding == which)
            .map(|(krate, _)| format!("{} {}", krate.name, krate.version))
            .collect()
    };
    let yanked = listed(Finding::Yanked);
    assert!(
        yanked.is_empty(),
        "yanked from crates.io: {yanked:?}; update them (cargo update -p NAME), or allow one in \
         ALLOWED_YANKED with the reason"
    );
    // Cargo caches an index file for every crate it resolves, whatever the platform: a crate it
    // has no word on means the cache was not filled by this lock file.
    let unknown = listed(Finding::Unknown);
    assert!(
        unknown.is_empty(),
        "not in cargo's index cache ({caches:?}): {unknown:?}; a `cargo fetch --locked` fills it"
    );
}

/// A cache file as cargo writes it: the header, a revision, and (version, line) pairs.
fn cache_file(revision: &str, versions: &[(&str, bool)]) -> Vec<u8> {
    let mut bytes = vec![3, 2, 0, 0, 0];
    bytes.extend(revision.as_bytes());
    bytes.push(0);
    for (version, yanked) in versions {
        bytes.extend(version.as_bytes());
        bytes.push(0);
        let line = serde_json::json!({
            "name": "x", "vers": version, "deps": [], "cksum": "00", "features": {},
            "yanked": yanked,
        });
        bytes.extend(serde_json::to_vec(&line).unwrap());
        bytes.push(0);
    }
    bytes
}

#[test]
fn the_check_finds_a_yanked_release_and_only_that() {
    let lock = r#"
version = 4

[[package]]
name = "good"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"

[[package]]
name = "bad"
version = "0.3.1"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "00"

[[package]]
name = "forgiven"
version = "2.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"

[[package]]
name = "meridian-dns"
version = "0.1.0"

[[package]]
name = "stray"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
"#;
    let locked = locked_from_crates_io(lock);
    assert_eq!(
        locked.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(),
        ["good", "bad", "forgiven", "stray"],
        "the workspace's own crates are not crates.io's"
    );
    let cached = |name: &str| -> Option<Vec<u8>> {
        match name {
            // A yank of another version says nothing of the locked one.
            "good" => Some(cache_file("etag", &[("0.9.0", true), ("1.0.0", false)])),
            "bad" => Some(cache_file("etag", &[("0.3.0", false), ("0.3.1", true)])),
            "forgiven" => Some(cache_file("Unknown", &[("2.0.0", true)])),
            _ => None,
        }
    };
    let found = findings(&locked, cached, &[("forgiven", "2.0.0", "a test")]);
    let found: Vec<(&str, &Finding)> = found.iter().map(|(k, f)| (k.name.as_str(), f)).collect();
    assert_eq!(
        found,
        [("bad", &Finding::Yanked), ("stray", &Finding::Unknown)]
    );
    // Allowing a crate that is not yanked allows nothing else.
    let found = findings(&locked, cached, &[("bad", "0.3.0", "another version")]);
    assert!(
        found
            .iter()
            .any(|(k, f)| k.name == "bad" && *f == Finding::Yanked)
    );
    // A truncated or foreign file is no word at all.
    assert_eq!(yanked_by_version(&[3, 2]), None);
    assert_eq!(
        yanked_by_version(b"\x03\x02\0\0\0rev\x001.0.0\0not json\0"),
        None
    );
}

#[test]
fn index_paths_follow_the_registry_layout() {
    for (name, path) in [
        ("a", "1/a"),
        ("ab", "2/ab"),
        ("abc", "3/a/abc"),
        ("Serde_JSON", "se/rd/serde_json"),
        ("yaml_serde", "ya/ml/yaml_serde"),
    ] {
        assert_eq!(index_path(name), PathBuf::from(path), "{name}");
    }
}
