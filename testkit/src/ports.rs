//! Loopback ports for servers the tests start as child processes.
//!
//! A port found free here is bound by the child only later (a Go program binds its listener
//! a second or more after it starts). Two things can take it in between, and the child then
//! dies on "address already in use":
//! - the kernel, handing the same port to another process's `bind(…:0)` or `connect()`: so
//!   ports come from below the kernel's ephemeral range, which it never hands out;
//! - another test process (test binaries run side by side) choosing the same port for its
//!   own child: so each port handed out is reserved by a lock on a file named after it, held
//!   until this process exits (the kernel drops the lock then, however it ends). Each lock
//!   keeps a file descriptor open for the life of the process: a few hundred in a test binary.
//!
//! What still binds random ports of its own in the pool is outside this: a server's outgoing
//! UDP sockets (Unbound's queries; PowerDNS picks below [`LOWEST`]).

use std::collections::HashSet;
use std::fs::{File, TryLockError};
use std::io::ErrorKind;
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::ops::Range;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Where the reservation locks are: one directory for every test process of the machine,
/// whatever `TMPDIR` each has (a test may give a helper process a `TMPDIR` of its own).
const LOCK_DIR: &str = "/tmp/meridian-port-reservations";
/// The lowest port handed out: above the well-known and registered services the machine
/// may run (a kubelet's 10250, …) and the ports PowerDNS picks for its own queries
/// (10000–19999).
const LOWEST: u16 = 20000;
/// How many ports the pool must have to be used; a machine whose ephemeral range leaves fewer
/// below it gets the kernel's free ports instead (the old race, made rarer by the locks).
const SMALLEST_POOL: u16 = 4096;

/// What a server child will listen on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listens {
    Tcp,
    /// TCP and UDP on the same port (a DNS server).
    TcpAndUdp,
}

/// A loopback port that is free now, that no other test process of this machine has been
/// handed (while it runs), and that the kernel does not hand out by itself.
pub fn reserve_loopback_port(listens: Listens) -> Result<u16, String> {
    static HELD: OnceLock<Mutex<Reservations>> = OnceLock::new();
    let held = HELD.get_or_init(|| Mutex::new(Reservations::new()));
    let mut held = held.lock().map_err(|_| "the port reservations' lock")?;
    held.reserve(listens)
}

struct Reservations {
    dir: PathBuf,
    pool: Option<Range<u16>>,
    ports: HashSet<u16>,
    /// The locks, kept open (and so held) for the life of the process.
    locks: Vec<File>,
}

impl Reservations {
    fn new() -> Self {
        let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|range| parse_port_range(&range));
        Reservations {
            dir: PathBuf::from(LOCK_DIR),
            pool: ephemeral.and_then(pool_below),
            ports: HashSet::new(),
            locks: Vec::new(),
        }
    }

    fn reserve(&mut self, listens: Listens) -> Result<u16, String> {
        shared_dir(&self.dir)?;
        let Some(pool) = self.pool.clone() else {
            return self.reserve_from_kernel(listens);
        };
        let size = pool.end - pool.start;
        let start = rand::random_range(0..size);
        for offset in 0..size {
            let port = pool.start + (start + offset) % size;
            if let Some(port) = self.try_reserve(port, listens)? {
                return Ok(port);
            }
        }
        Err(format!(
            "no free loopback port in {}..{}",
            pool.start, pool.end
        ))
    }

    /// Ports the kernel picks (free now), each still locked against other test processes.
    fn reserve_from_kernel(&mut self, listens: Listens) -> Result<u16, String> {
        for _ in 0..1000 {
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|listener| listener.local_addr())
                .map_err(|e| format!("binding a loopback port: {e}"))?
                .port();
            if let Some(port) = self.try_reserve(port, listens)? {
                return Ok(port);
            }
        }
        Err("no free loopback port from the kernel in 1000 tries".into())
    }

    /// `port`, reserved, when no one has it: not this process, not another test process, not
    /// a listener of any process.
    fn try_reserve(&mut self, port: u16, listens: Listens) -> Result<Option<u16>, String> {
        if self.ports.contains(&port) {
            return Ok(None);
        }
        let path = self.dir.join(port.to_string());
        let Some(lock) = lock_file(&path)? else {
            return Ok(None);
        };
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(e)) => {
                return Err(format!("locking {}: {e}", path.display()));
            }
        }
        if !is_free(port, listens) {
            // Dropping the file releases the lock: someone outside the tests has the port.
            return Ok(None);
        }
        self.ports.insert(port);
        self.locks.push(lock);
        Ok(Some(port))
    }
}

/// The lock directory, made writable by every user (as `/tmp` is: sticky), so that test
/// processes of different users share it.
fn shared_dir(dir: &Path) -> Result<(), String> {
    if dir.is_dir() {
        return Ok(());
    }
    match std::fs::DirBuilder::new().mode(0o1777).create(dir) {
        // The umask narrowed the mode.
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))
            .map_err(|e| format!("opening up {}: {e}", dir.display())),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("creating {}: {e}", dir.display())),
    }
}

/// The lock file of a port, created if missing; `None` when another user's file cannot be
/// opened at all (its port is skipped). An existing file is opened to read: a lock needs no
/// more.
fn lock_file(path: &Path) -> Result<Option<File>, String> {
    let created = File::options()
        .create_new(true)
        .write(true)
        .mode(0o666)
        .open(path);
    match created {
        Ok(file) => return Ok(Some(file)),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("creating {}: {e}", path.display())),
    }
    match File::open(path) {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => Ok(None),
        Err(e) => Err(format!("opening {}: {e}", path.display())),
    }
}

/// Whether nothing listens on (or is bound to) `port` on loopback now.
fn is_free(port: u16, listens: Listens) -> bool {
    let tcp = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok();
    tcp && (listens == Listens::Tcp || UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok())
}

/// `ip_local_port_range`'s two numbers.
fn parse_port_range(text: &str) -> Option<(u16, u16)> {
    let mut numbers = text.split_whitespace().map(str::parse::<u16>);
    match (numbers.next(), numbers.next()) {
        (Some(Ok(low)), Some(Ok(high))) if low <= high => Some((low, high)),
        _ => None,
    }
}

/// The ports from [`LOWEST`] up to the kernel's ephemeral range, when there are enough.
fn pool_below((ephemeral_low, _): (u16, u16)) -> Option<Range<u16>> {
    (ephemeral_low.saturating_sub(LOWEST) >= SMALLEST_POOL).then_some(LOWEST..ephemeral_low)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_stays_below_the_ephemeral_range_or_is_not_used() {
        assert_eq!(parse_port_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(parse_port_range("60999 32768"), None);
        assert_eq!(parse_port_range("1024"), None);
        assert_eq!(pool_below((32768, 60999)), Some(LOWEST..32768));
        // A range reaching down to the pool leaves too few ports below it.
        assert_eq!(pool_below((LOWEST + SMALLEST_POOL - 1, 65535)), None);
        assert_eq!(pool_below((1024, 65535)), None);
    }

    #[test]
    fn ports_are_handed_out_once_and_are_free() {
        let ports: Vec<u16> = (0..200)
            .map(|_| reserve_loopback_port(Listens::TcpAndUdp).unwrap())
            .collect();
        assert_eq!(ports.iter().collect::<HashSet<_>>().len(), 200);
        let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|range| parse_port_range(&range))
            .map_or(u16::MAX, |(low, _)| low);
        for port in ports {
            assert!(is_free(port, Listens::TcpAndUdp), "{port} is taken");
            if pool_below((low, 0)).is_some() {
                assert!((LOWEST..low).contains(&port), "{port}");
            }
        }
    }

    #[test]
    fn a_lock_file_another_user_left_is_locked_through_a_read_only_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("20001");
        std::fs::write(&path, "").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        let lock = lock_file(&path).unwrap().expect("an existing file opens");
        lock.try_lock().unwrap();
        // A new file is made for everyone to open.
        let fresh = dir.path().join("20002");
        drop(lock_file(&fresh).unwrap().expect("a new file"));
        assert!(fresh.exists());
    }

    #[test]
    fn a_port_another_process_reserved_is_not_handed_out() {
        // Two ports free now, each with a reservation of its own in a directory of the test's.
        let [taken, free] = [(); 2].map(|()| reserve_loopback_port(Listens::TcpAndUdp).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let mut ours = Reservations {
            dir: dir.path().to_path_buf(),
            pool: None,
            ports: HashSet::new(),
            locks: Vec::new(),
        };
        // Another test process holds `taken`: its lock on the port's file (through a file of
        // its own, as foreign to this one as another process's).
        let other = File::create(dir.path().join(taken.to_string())).unwrap();
        other.try_lock().unwrap();
        assert_eq!(ours.try_reserve(taken, Listens::Tcp), Ok(None));
        assert_eq!(ours.try_reserve(free, Listens::Tcp), Ok(Some(free)));
        // Not twice in one process either.
        assert_eq!(ours.try_reserve(free, Listens::Tcp), Ok(None));
        // Once that process is gone, the port is handed out.
        drop(other);
        assert_eq!(ours.try_reserve(taken, Listens::Tcp), Ok(Some(taken)));
        // A port something listens on is not.
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let bound = listener.local_addr().unwrap().port();
        assert_eq!(ours.try_reserve(bound, Listens::Tcp), Ok(None));
    }
}
