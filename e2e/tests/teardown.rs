//! No process the test bed starts outlives the test that started it: not when the test panics
//! (destructors run while unwinding), and not when the test process is killed outright (the
//! kernel's parent-death signal).
//!
//! Each proof runs a helper test in a child copy of this test binary, so the child can panic or
//! be killed without taking this test with it. The helper writes the PIDs of everything its fleet
//! started; this test then checks that every one of them is gone.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use meridian_e2e::{Error, Fleet, eventually, is_alive};

const MODE_ENV: &str = "MERIDIAN_TEARDOWN_MODE";
const PIDS_ENV: &str = "MERIDIAN_TEARDOWN_PIDS";

/// Helper run only as a child of the tests below (hence ignored in a normal run).
#[tokio::test]
#[ignore = "run by the teardown tests in a child process"]
async fn fleet_in_child_process() -> Result<(), Error> {
    let mode = std::env::var(MODE_ENV).expect("started by a teardown test");
    let pids_file = PathBuf::from(std::env::var(PIDS_ENV).expect("started by a teardown test"));
    let fleet = Fleet::builder().spokes(["spoke-1"]).start().await?;
    let pids: Vec<String> = fleet.pids().iter().map(u32::to_string).collect();
    // Written whole and then renamed, so the parent never reads half a list.
    let partial = pids_file.with_extension("partial");
    std::fs::write(&partial, pids.join("\n")).expect("write pids");
    std::fs::rename(&partial, &pids_file).expect("publish pids");
    match mode.as_str() {
        "panic" => panic!("deliberate panic with a running fleet"),
        _ => loop {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        },
    }
}

/// Starts the helper with its temporary files under `dir`, which this test owns and deletes:
/// a killed helper cannot delete its control planes' directories itself.
fn spawn_helper(mode: &str, dir: &Path) -> Child {
    Command::new(std::env::current_exe().expect("test binary path"))
        .args([
            "--ignored",
            "--exact",
            "fleet_in_child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(MODE_ENV, mode)
        .env(PIDS_ENV, dir.join("pids"))
        .env("TMPDIR", dir)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the helper")
}

fn read_pids(pids_file: &Path) -> Vec<u32> {
    std::fs::read_to_string(pids_file)
        .expect("the helper wrote its pids")
        .lines()
        .map(|line| line.parse().expect("a pid"))
        .collect()
}

async fn all_gone(pids: &[u32]) -> Result<(), Error> {
    eventually(
        "every test-bed process to end",
        Duration::from_secs(30),
        || async {
            let alive: Vec<u32> = pids.iter().copied().filter(|pid| is_alive(*pid)).collect();
            Ok(alive.is_empty().then_some(()))
        },
    )
    .await
}

#[tokio::test]
async fn nothing_outlives_a_panicking_test() -> Result<(), Error> {
    let dir = tempfile::tempdir().expect("temp dir");
    let pids_file = dir.path().join("pids");
    let status = spawn_helper("panic", dir.path())
        .wait()
        .expect("helper ran");
    assert!(!status.success(), "the helper test panicked");

    let pids = read_pids(&pids_file);
    // hub and spoke: etcd + apiserver each, plus the placement controller and one work agent.
    assert_eq!(pids.len(), 6, "pids: {pids:?}");
    all_gone(&pids).await
}

#[tokio::test]
async fn nothing_outlives_a_killed_test() -> Result<(), Error> {
    let dir = tempfile::tempdir().expect("temp dir");
    let pids_file = dir.path().join("pids");
    let mut helper = spawn_helper("wait", dir.path());
    eventually(
        "the helper's fleet to start",
        Duration::from_secs(180),
        || {
            let exited = helper.try_wait().expect("helper status");
            let ready = pids_file.exists();
            async move {
                if let Some(status) = exited {
                    panic!("the helper exited before its fleet was up: {status}");
                }
                Ok(ready.then_some(()))
            }
        },
    )
    .await?;
    let pids = read_pids(&pids_file);
    assert!(
        pids.iter().all(|pid| is_alive(*pid)),
        "the fleet runs while its test runs"
    );

    // SIGKILL: no destructor runs in the helper, only the kernel's parent-death signal is left.
    helper.kill().expect("kill the helper");
    helper.wait().expect("reap the helper");
    all_gone(&pids).await
}
