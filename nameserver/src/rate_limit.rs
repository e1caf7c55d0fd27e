//! Response rate limiting (RRL) over UDP, per client prefix, as BIND, Knot and NSD do it: a
//! forged source address makes an authoritative server an amplifier aimed at the victim, so
//! each prefix (IPv4 /24, IPv6 /56) gets a token bucket of responses per second. Beyond it,
//! every `slip`th response goes out truncated and empty (TC), which a real resolver retries
//! over TCP, which is not limited and cannot be forged; the rest are dropped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Prefix lengths that make one client, as BIND's defaults (`ipv4-prefix-length 24`,
/// `ipv6-prefix-length 56`).
const IPV4_PREFIX: u32 = 24;
const IPV6_PREFIX: u32 = 56;
/// Independent locks, so the UDP workers seldom wait for each other.
const SHARDS: usize = 16;
/// Prefixes remembered per shard before idle ones are forgotten.
const SHARD_CAPACITY: usize = 4096;

/// A bucket untouched this long is full again, as good as forgotten.
const FULL_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Responses per second to one client prefix; a second's worth may come at once.
    pub responses_per_second: u32,
    /// Every `slip`th limited response is sent truncated instead of dropped; 0 drops all, 1
    /// truncates all.
    pub slip: u32,
}

/// Responses per second per client prefix for a server facing the Internet: enough for a
/// busy resolver, far below what makes an amplifier worth using.
pub const DEFAULT_RESPONSES_PER_SECOND: u32 = 100;

impl RateLimit {
    /// `responses_per_second` with BIND's and Knot's default slip (every second held-back
    /// response goes out truncated); none for 0, which turns limiting off.
    pub fn per_second(responses_per_second: u32) -> Option<RateLimit> {
        (responses_per_second > 0).then_some(RateLimit {
            responses_per_second,
            slip: 2,
        })
    }
}

/// What to do with one UDP response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Send,
    /// Send it truncated and empty, so the client retries over TCP.
    Slip,
    Drop,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
    limited: u32,
}

/// The buckets of every client prefix seen lately.
#[derive(Debug)]
pub struct RateLimiter {
    limit: RateLimit,
    shards: [Mutex<HashMap<u128, Bucket>>; SHARDS],
}

/// The client prefix `source` belongs to, as one number (IPv4 mapped into IPv6).
fn prefix_key(source: IpAddr) -> u128 {
    match source {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4) & (u32::MAX << (32 - IPV4_PREFIX));
            u128::from(bits) | (0xffff << 32)
        }
        IpAddr::V6(v6) => u128::from(v6) & (u128::MAX << (128 - IPV6_PREFIX)),
    }
}

/// The shard of a prefix key. The keys' low bits are zero (they are masked prefixes), so they
/// are mixed first (Fibonacci hashing) and the shard taken from the top bits.
fn shard_of(key: u128) -> usize {
    let folded = (key as u64) ^ ((key >> 64) as u64);
    (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SHARDS.trailing_zeros())) as usize
}

impl RateLimiter {
    pub fn new(limit: RateLimit) -> Self {
        RateLimiter {
            limit,
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
        }
    }

    /// Whether a response to `source` may go out now.
    pub fn check(&self, source: IpAddr, now: Instant) -> Verdict {
        let key = prefix_key(source);
        let rate = f64::from(self.limit.responses_per_second.max(1));
        let shard = &self.shards[shard_of(key)];
        let mut buckets = shard.lock().expect("no panics while a bucket is held");
        if buckets.len() >= SHARD_CAPACITY && !buckets.contains_key(&key) {
            // A full bucket is as good as a forgotten one.
            buckets.retain(|_, b| now.saturating_duration_since(b.refilled) < FULL_AFTER);
        }
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: rate,
            refilled: now,
            limited: 0,
        });
        let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            bucket.limited = 0;
            return Verdict::Send;
        }
        bucket.limited = bucket.limited.wrapping_add(1);
        match self.limit.slip {
            0 => Verdict::Drop,
            slip if bucket.limited.is_multiple_of(slip) => Verdict::Slip,
            _ => Verdict::Drop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_prefix_gets_its_rate_then_every_slipth_response_truncated() {
        let limiter = RateLimiter::new(RateLimit {
            responses_per_second: 3,
            slip: 2,
        });
        let start = Instant::now();
        let client: IpAddr = "192.0.2.7".parse().unwrap();
        let verdicts: Vec<Verdict> = (0..7).map(|_| limiter.check(client, start)).collect();
        use Verdict::{Drop, Send, Slip};
        assert_eq!(verdicts, [Send, Send, Send, Drop, Slip, Drop, Slip]);
        // The same /24 shares the bucket; another prefix has its own.
        assert_eq!(limiter.check("192.0.2.200".parse().unwrap(), start), Drop);
        assert_eq!(limiter.check("192.0.3.1".parse().unwrap(), start), Send);
        assert_eq!(
            limiter.check("2001:db8:0:ff::1".parse().unwrap(), start),
            Send
        );
        // A third of a second later one token is back.
        let later = start + Duration::from_millis(340);
        assert_eq!(limiter.check(client, later), Send);
        assert_eq!(limiter.check(client, later), Drop);
    }

    #[test]
    fn neighbouring_prefixes_spread_over_the_shards() {
        let v4: std::collections::HashSet<usize> = (0..64u32)
            .map(|n| {
                shard_of(prefix_key(IpAddr::from(
                    (0xC000_0000u32 + (n << 8)).to_be_bytes(),
                )))
            })
            .collect();
        let v6: std::collections::HashSet<usize> = (0..64u128)
            .map(|n| {
                shard_of(prefix_key(IpAddr::from(
                    ((0x2001_0db8u128 << 96) + (n << 72)).to_be_bytes(),
                )))
            })
            .collect();
        assert!(
            v4.len() > SHARDS / 2 && v6.len() > SHARDS / 2,
            "{v4:?} {v6:?}"
        );
        assert!(v4.iter().chain(&v6).all(|shard| *shard < SHARDS));
    }

    #[test]
    fn slip_zero_drops_everything_over_the_limit_and_one_truncates_everything() {
        let now = Instant::now();
        let client: IpAddr = "2001:db8::1".parse().unwrap();
        for (slip, expected) in [(0, Verdict::Drop), (1, Verdict::Slip)] {
            let limiter = RateLimiter::new(RateLimit {
                responses_per_second: 1,
                slip,
            });
            assert_eq!(limiter.check(client, now), Verdict::Send);
            for _ in 0..5 {
                assert_eq!(limiter.check(client, now), expected, "slip {slip}");
            }
        }
    }
}
