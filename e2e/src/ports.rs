//! Free loopback ports for the test bed's servers: reserved against this process, the other
//! test processes of the machine, and the kernel (see [`meridian_testkit::ports`]).

use crate::Error;
use meridian_testkit::ports::{Listens, reserve_loopback_port};

pub fn free_loopback_port() -> Result<u16, Error> {
    reserve_loopback_port(Listens::Tcp).map_err(Error::Component)
}
