//! Response rate limiting (RRL) over UDP, per client prefix, as BIND, Knot and NSD do it: a
//! forged source address makes an authoritative server an amplifier aimed at the victim, so
//! each prefix (IPv4 /24, IPv6 /56) gets a token bucket of responses per second. Beyond it,
//! every `slip`th response goes out truncated and empty (TC), which a real resolver retries
//! over TCP, which is not limited and cannot be forged; the rest are dropped.
//!
//! The buckets live in a table of fixed size, as Knot's does: a flood of forged prefixes
//! (millions of them, each seen once) neither grows it nor slows it. A prefix has one of
//! [`WAYS`] slots of its set; a new one takes an empty slot or the one used longest ago, in
//! constant time. Evicting a bucket forgets it, which is what an idle bucket would become
//! anyway (full); a prefix being limited is touched at its flood's rate and is the last of its
//! set to go.

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Prefix lengths that make one client, as BIND's defaults (`ipv4-prefix-length 24`,
/// `ipv6-prefix-length 56`).
const IPV4_PREFIX: u32 = 24;
const IPV6_PREFIX: u32 = 56;
/// Independent locks, so the UDP workers seldom wait for each other.
const SHARDS: usize = 16;
/// Buckets per shard: 65,536 prefixes in all, about 3 MiB, never more.
const SHARD_SLOTS: usize = 4096;
/// Slots a prefix may live in (its set); the oldest of them makes room for a new prefix.
const WAYS: usize = 4;
const SETS: usize = SHARD_SLOTS / WAYS;

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

/// One client prefix's bucket.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// The prefix ([`prefix_key`]); `None` for a slot never used.
    key: Option<u128>,
    tokens: f64,
    refilled: Instant,
    limited: u32,
}

/// The buckets of the client prefixes seen lately, in a table that never grows.
#[derive(Debug)]
pub struct RateLimiter {
    limit: RateLimit,
    shards: [Mutex<Box<[Slot]>>; SHARDS],
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

/// The shard and set of a prefix key. The keys' low bits are zero (they are masked prefixes),
/// so they are mixed first (Fibonacci hashing): the shard comes from the top bits, the set
/// from the ones below.
fn place_of(key: u128) -> (usize, usize) {
    let folded = (key as u64) ^ ((key >> 64) as u64);
    let mixed = folded.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let shard = (mixed >> (64 - SHARDS.trailing_zeros())) as usize;
    let set = ((mixed >> (64 - SHARDS.trailing_zeros() - SETS.trailing_zeros())) as usize) % SETS;
    (shard, set)
}

impl RateLimiter {
    pub fn new(limit: RateLimit) -> Self {
        let now = Instant::now();
        let empty = Slot {
            key: None,
            tokens: 0.0,
            refilled: now,
            limited: 0,
        };
        RateLimiter {
            limit,
            shards: std::array::from_fn(|_| Mutex::new(vec![empty; SHARD_SLOTS].into())),
        }
    }

    /// How many prefixes the table holds buckets for (at most 65,536, whatever the traffic).
    pub fn remembered(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let slots = shard.lock().expect("no panics while a bucket is held");
                slots.iter().filter(|slot| slot.key.is_some()).count()
            })
            .sum()
    }

    /// Whether a response to `source` may go out now.
    pub fn check(&self, source: IpAddr, now: Instant) -> Verdict {
        let key = prefix_key(source);
        let rate = f64::from(self.limit.responses_per_second.max(1));
        let (shard, set) = place_of(key);
        let mut slots = self.shards[shard]
            .lock()
            .expect("no panics while a bucket is held");
        let ways = &mut slots[set * WAYS..(set + 1) * WAYS];
        let index = match ways.iter().position(|slot| slot.key == Some(key)) {
            Some(index) => index,
            None => {
                // An empty slot, else the one used longest ago: forgotten, as full as an
                // idle bucket becomes.
                let (index, _) = ways
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, slot)| slot.key.map(|_| slot.refilled))
                    .expect("a set has slots");
                ways[index] = Slot {
                    key: Some(key),
                    tokens: rate,
                    refilled: now,
                    limited: 0,
                };
                index
            }
        };
        let bucket = &mut ways[index];
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
                place_of(prefix_key(IpAddr::from(
                    (0xC000_0000u32 + (n << 8)).to_be_bytes(),
                )))
                .0
            })
            .collect();
        let v6: std::collections::HashSet<usize> = (0..64u128)
            .map(|n| {
                place_of(prefix_key(IpAddr::from(
                    ((0x2001_0db8u128 << 96) + (n << 72)).to_be_bytes(),
                )))
                .0
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

    #[test]
    fn a_flood_of_forged_prefixes_neither_grows_the_table_nor_frees_the_victim() {
        let limiter = RateLimiter::new(RateLimit {
            responses_per_second: 10,
            slip: 2,
        });
        let start = Instant::now();
        let victim: IpAddr = "198.51.100.7".parse().unwrap();
        let legitimate: IpAddr = "203.0.113.9".parse().unwrap();
        let mut victim_sent = 0;
        let mut legitimate_sent = 0;
        // A million forged prefixes, each seen once, over ten seconds; the victim's address
        // forged in between at 1,000 per second, and a legitimate client asking 5 per second.
        for n in 0..1_000_000u32 {
            let now = start + std::time::Duration::from_micros(u64::from(n) * 10);
            let forged = IpAddr::from((0x0A00_0000u32 + (n << 8)).to_be_bytes());
            limiter.check(forged, now);
            if n % 100 == 0 && limiter.check(victim, now) == Verdict::Send {
                victim_sent += 1;
            }
            if n % 20_000 == 0 && limiter.check(legitimate, now) == Verdict::Send {
                legitimate_sent += 1;
            }
        }
        assert!(limiter.remembered() <= SHARDS * SHARD_SLOTS);
        // Ten seconds at 10 per second, plus the first second's burst: the flood did not
        // evict the victim's bucket into a fresh one.
        assert!(
            victim_sent <= 110,
            "{victim_sent} responses reached the victim"
        );
        assert_eq!(
            legitimate_sent, 50,
            "every legitimate question was answered"
        );
    }

    #[test]
    fn every_set_of_every_shard_is_used() {
        let places: std::collections::HashSet<(usize, usize)> = (0..1u32 << 16)
            .map(|n| place_of(prefix_key(IpAddr::from((n << 8).to_be_bytes()))))
            .collect();
        assert!(places.len() > SHARDS * SETS * 9 / 10, "{}", places.len());
        assert!(
            places
                .iter()
                .all(|(shard, set)| *shard < SHARDS && *set < SETS)
        );
    }
}
