//! The hub's file budget. Every connection a client holds is a file, and past the process's
//! limit `accept()` fails for every port at once, the probes' included. So the hub raises its
//! soft limit to the hard one at start (as Go's runtime does for every Go program), and sizes
//! what each listener may hold to that limit: the two HTTP ports
//! ([`crate::http::Limits::within_open_files`]) and the nameserver's TCP connections
//! ([`dns_tcp_connections`]) together stay below it, with [`FILES_RESERVED`] left
//! for the API clients and the DNS sockets.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Files the hub needs besides its client connections: API server connections and watches,
/// the DNS sockets (one UDP socket per core), the runtime's own, logs.
pub const FILES_RESERVED: u64 = 96;

/// Raises the soft limit on open files to the hard limit, and returns the limit now in force
/// (a generous guess when it cannot be read).
pub fn raise() -> u64 {
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        tracing::debug!(from = soft, to = hard, "raised the open files limit");
        return hard;
    }
    soft
}

/// The limit on open files in force now (a generous guess when it cannot be read).
pub fn limit() -> u64 {
    getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft)
}

/// The nameserver's TCP connections within `open_files`: at most `default`, and at most half
/// of what is left after the reserve (the HTTP ports take a quarter).
pub fn dns_tcp_connections(open_files: u64, default: usize) -> usize {
    let half = open_files.saturating_sub(FILES_RESERVED) / 2;
    default
        .min(usize::try_from(half).unwrap_or(usize::MAX))
        .max(8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Limits;

    #[test]
    fn every_listener_full_at_once_stays_below_the_limit() {
        for open_files in [128, 256, 512, 1_024, 4_096, 1_048_576] {
            let http = Limits::default()
                .within_open_files(open_files)
                .max_connections;
            let dns = dns_tcp_connections(open_files, 150);
            let held = (2 * http + dns) as u64 + FILES_RESERVED;
            assert!(held <= open_files, "{open_files}: {held} held");
        }
        assert_eq!(dns_tcp_connections(1_048_576, 150), 150);
        assert_eq!(dns_tcp_connections(256, 150), 80);
    }
}
