//! Free loopback ports. The kernel picks an unused port; a process-wide set keeps two control
//! planes started at the same moment from being handed the same one before either binds it.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::{Mutex, OnceLock};

use crate::Error;

pub fn free_loopback_port() -> Result<u16, Error> {
    static HANDED_OUT: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let handed_out = HANDED_OUT.get_or_init(Default::default);
    loop {
        let listener =
            TcpListener::bind(("127.0.0.1", 0)).map_err(Error::io("binding a loopback port"))?;
        let port = listener
            .local_addr()
            .map_err(Error::io("reading a loopback port"))?
            .port();
        if handed_out.lock().expect("port set lock").insert(port) {
            return Ok(port);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_never_handed_out_twice() {
        let ports: HashSet<u16> = (0..200).map(|_| free_loopback_port().unwrap()).collect();
        assert_eq!(ports.len(), 200);
    }
}
