//! Child processes that cannot outlive their owner.
//!
//! Two mechanisms, because either alone leaves a gap:
//! - `Drop` kills and reaps the child, which covers normal ends and panics (unwinding runs
//!   destructors);
//! - the child starts under `setpriv --pdeathsig KILL`, so the kernel kills it when the thread
//!   that spawned it exits, which covers a test process that is itself killed or aborts.
//!
//! The parent-death signal is tied to the spawning *thread*. Spawn from the thread that owns the
//! test (a test body, `main`, or a runtime worker that lives as long as the test), never from a
//! short-lived helper thread such as tokio's blocking pool.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::Error;

/// A running child process whose output goes to a log file; killed on drop.
#[derive(Debug)]
pub struct ManagedProcess {
    name: String,
    child: Child,
    log_path: PathBuf,
}

impl ManagedProcess {
    /// Starts `program args…`, its stdout and stderr appended to `log_path`.
    pub fn spawn(
        name: impl Into<String>,
        program: &Path,
        args: &[String],
        log_path: &Path,
    ) -> Result<Self, Error> {
        let name = name.into();
        let log = File::create(log_path)
            .map_err(Error::io(format!("creating {}", log_path.display())))?;
        let log_for_stderr = log
            .try_clone()
            .map_err(Error::io("duplicating a log handle"))?;
        // A process group of its own: a Ctrl-C at the terminal reaches the owner, whose orderly
        // teardown (a node deletes its pods through its API server) needs the children alive.
        let child = Command::new("setpriv")
            .process_group(0)
            .arg("--pdeathsig")
            .arg("KILL")
            .arg("--")
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_for_stderr)
            .spawn()
            .map_err(|source| Error::Spawn {
                program: program.display().to_string(),
                source,
            })?;
        tracing::debug!(%name, pid = child.id(), log = %log_path.display(), "started");
        Ok(ManagedProcess {
            name,
            child,
            log_path: log_path.to_path_buf(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Fails with the end of the log when the process has already exited.
    pub fn ensure_running(&mut self) -> Result<(), Error> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(Error::ExitedEarly {
                what: self.name.clone(),
                status,
                log_tail: self.log_tail(),
            }),
            Err(source) => Err(Error::Io {
                context: format!("waiting for {}", self.name),
                source,
            }),
        }
    }

    /// The last lines of the process's log, for error messages.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log_path, 4096)
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        // SIGKILL: everything the test bed runs keeps its state in a temporary directory that is
        // deleted next, so there is nothing to shut down gracefully for.
        let _ = self.child.kill();
        let _ = self.child.wait();
        tracing::debug!(name = %self.name, "stopped");
    }
}

/// Whether `pid` is a live process: present in /proc and not a zombie waiting to be reaped.
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The last `max_bytes` of a file, starting at a line boundary.
pub(crate) fn log_tail(path: &Path, max_bytes: u64) -> String {
    let Ok(mut file) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(max_bytes)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let text = if len > max_bytes {
        text.split_once('\n').map_or(&*text, |(_, rest)| rest)
    } else {
        &text
    };
    text.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_starts_at_a_line_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let lines: String = (0..100).map(|i| format!("line {i:03}\n")).collect();
        std::fs::write(&path, &lines).unwrap();

        let tail = log_tail(&path, 30);
        assert!(tail.starts_with("line "), "{tail:?}");
        assert!(tail.ends_with("line 099\n"));
        assert!(tail.len() <= 30);
        assert_eq!(
            log_tail(&path, 10_000),
            lines,
            "a short log is returned whole"
        );
    }

    #[test]
    fn a_process_that_exits_reports_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let args = ["-c".to_string(), "echo about to fail; exit 3".to_string()];
        let mut process = ManagedProcess::spawn("failing", Path::new("sh"), &args, &log).unwrap();
        let error = loop {
            match process.ensure_running() {
                Ok(()) => std::thread::sleep(std::time::Duration::from_millis(20)),
                Err(error) => break error,
            }
        };
        let message = error.to_string();
        assert!(message.contains("failing exited early"), "{message}");
        assert!(message.contains("about to fail"), "{message}");
    }
}
