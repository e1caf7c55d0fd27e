//! DNS cookies (RFC 7873, with the server cookie laid out as RFC 9018 lays it out): a client
//! that sends a client cookie gets back a server cookie bound to its address, which proves on
//! its next query that it is not spoofing that address.
//!
//! The server cookie is version 1, three reserved bytes, the time it was made and an 8-byte
//! MAC (HMAC-SHA256, truncated) over the client cookie, those first 8 bytes and the client's
//! address, keyed by a secret each server makes at start. A server cookie another server made
//! (another replica) or an old one is simply replaced: answers never fail for want of one.

use std::net::IpAddr;

use hickory_proto::rr::rdata::tsig::TsigAlgorithm;

/// The EDNS option code of COOKIE.
pub(crate) const OPTION_CODE: u16 = 10;
const CLIENT_COOKIE: usize = 8;
const SERVER_COOKIE: usize = 16;
/// How long a server cookie stays valid (RFC 9018: an hour), and how far in the future its
/// time may be (clock steps).
const LIFETIME: u32 = 3600;
const FUTURE: u32 = 300;
const VERSION: u8 = 1;

/// The cookie option a response carries, or `None` when the request's option is malformed
/// (FORMERR: a client cookie is 8 bytes, a server cookie 8 to 32).
pub(crate) fn reply(
    option: &[u8],
    secret: &[u8],
    client: IpAddr,
    now: u32,
) -> Option<[u8; CLIENT_COOKIE + SERVER_COOKIE]> {
    if option.len() != CLIENT_COOKIE && !(16..=40).contains(&option.len()) {
        return None;
    }
    let client_cookie = &option[..CLIENT_COOKIE];
    let mut cookie = [0u8; CLIENT_COOKIE + SERVER_COOKIE];
    cookie[..CLIENT_COOKIE].copy_from_slice(client_cookie);
    cookie[CLIENT_COOKIE..].copy_from_slice(&server_cookie(client_cookie, secret, client, now));
    Some(cookie)
}

/// Whether `option` carries a server cookie this server made for `client` within its lifetime.
pub(crate) fn is_valid(option: &[u8], secret: &[u8], client: IpAddr, now: u32) -> bool {
    if option.len() != CLIENT_COOKIE + SERVER_COOKIE || option[CLIENT_COOKIE] != VERSION {
        return false;
    }
    let made = u32::from_be_bytes(option[12..16].try_into().expect("four bytes"));
    let fresh = made.wrapping_sub(now) <= FUTURE || now.wrapping_sub(made) <= LIFETIME;
    fresh
        && option[CLIENT_COOKIE..] == server_cookie(&option[..CLIENT_COOKIE], secret, client, made)
}

fn server_cookie(client_cookie: &[u8], secret: &[u8], client: IpAddr, time: u32) -> [u8; 16] {
    let mut cookie = [0u8; SERVER_COOKIE];
    cookie[0] = VERSION;
    cookie[4..8].copy_from_slice(&time.to_be_bytes());
    let mut input = Vec::with_capacity(CLIENT_COOKIE + 8 + 16);
    input.extend_from_slice(client_cookie);
    input.extend_from_slice(&cookie[..8]);
    match client {
        IpAddr::V4(address) => input.extend_from_slice(&address.octets()),
        IpAddr::V6(address) => input.extend_from_slice(&address.octets()),
    }
    let mac = TsigAlgorithm::HmacSha256
        .mac_data(secret, &input)
        .expect("HMAC-SHA256 takes any key");
    cookie[8..].copy_from_slice(&mac[..8]);
    cookie
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef";
    const NOW: u32 = 1_800_000_000;

    fn client() -> IpAddr {
        "192.0.2.7".parse().unwrap()
    }

    #[test]
    fn a_server_cookie_is_bound_to_the_client_the_secret_and_an_hour() {
        let first = reply(b"clientck", SECRET, client(), NOW).unwrap();
        assert_eq!(first.len(), 24);
        assert_eq!(&first[..8], b"clientck", "the client cookie comes back");
        assert!(is_valid(&first, SECRET, client(), NOW + 10));
        assert!(is_valid(&first, SECRET, client(), NOW + LIFETIME));
        assert!(
            !is_valid(&first, SECRET, client(), NOW + LIFETIME + 1),
            "stale"
        );
        assert!(
            !is_valid(&first, SECRET, "192.0.2.8".parse().unwrap(), NOW),
            "another address"
        );
        assert!(
            !is_valid(&first, b"another secret", client(), NOW),
            "another server"
        );
        let mut forged = first;
        forged[23] ^= 1;
        assert!(!is_valid(&forged, SECRET, client(), NOW));
        // A request carrying the server cookie gets a fresh one for the same client cookie.
        let again = reply(&first, SECRET, client(), NOW + 60).unwrap();
        assert_eq!(&again[..8], b"clientck");
        assert!(is_valid(&again, SECRET, client(), NOW + 60));
    }

    #[test]
    fn malformed_cookie_options_are_refused() {
        for length in [0, 1, 7, 9, 15, 41] {
            assert_eq!(
                reply(&vec![7u8; length], SECRET, client(), NOW),
                None,
                "{length}"
            );
        }
        for length in [8, 16, 24, 40] {
            assert!(reply(&vec![7u8; length], SECRET, client(), NOW).is_some());
        }
    }
}
