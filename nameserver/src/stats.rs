//! What the nameserver answered, as Prometheus counters: queries by type and response code,
//! and how dynamic answers were chosen. Counting is a relaxed atomic add per query on a tally
//! of the answering thread's own, so it needs no lock and threads answering at once do not
//! pass a cache line between cores on every query; the tallies are summed when read.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType as WireType;

use crate::rate_limit::Verdict;

/// Query types counted on their own; every other type is `other`.
const TYPES: [(&str, Option<WireType>); 10] = [
    ("A", Some(WireType::A)),
    ("AAAA", Some(WireType::AAAA)),
    ("CNAME", Some(WireType::CNAME)),
    ("TXT", Some(WireType::TXT)),
    ("NS", Some(WireType::NS)),
    ("SOA", Some(WireType::SOA)),
    ("ANY", Some(WireType::ANY)),
    ("AXFR", Some(WireType::AXFR)),
    ("IXFR", Some(WireType::IXFR)),
    ("other", None),
];

/// Response codes the server gives; anything else is `other`.
const RCODES: [(&str, Option<ResponseCode>); 8] = [
    ("NOERROR", Some(ResponseCode::NoError)),
    ("NXDOMAIN", Some(ResponseCode::NXDomain)),
    ("REFUSED", Some(ResponseCode::Refused)),
    ("FORMERR", Some(ResponseCode::FormErr)),
    ("NOTIMP", Some(ResponseCode::NotImp)),
    ("SERVFAIL", Some(ResponseCode::ServFail)),
    ("BADVERS", Some(ResponseCode::BADVERS)),
    ("other", None),
];

/// How one dynamic answer was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// A GEO set: the client's country matched.
    GeoCountry,
    /// A GEO set: the client's continent matched.
    GeoContinent,
    /// A GEO set: the catch-all `*` answered.
    GeoCatchAll,
    /// A GEO set without a match or a catch-all: the lowest set identifier answered.
    GeoFallback,
    /// A weighted set: one record drawn by weight.
    Weighted,
}

const CHOICES: [(Choice, &str, &str); 5] = [
    (Choice::GeoCountry, "geo", "country"),
    (Choice::GeoContinent, "geo", "continent"),
    (Choice::GeoCatchAll, "geo", "catch_all"),
    (Choice::GeoFallback, "geo", "fallback"),
    (Choice::Weighted, "weighted", "drawn"),
];

/// Why the server closed a TCP connection of its own accord.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpClosed {
    /// At once: the server held as many connections as it may.
    Full,
    /// At once: the client's address held its share.
    PerClient,
    /// The client took no answer for the idle time (it pipelines and never reads).
    Stalled,
}

const TCP_CLOSED: [(TcpClosed, &str); 3] = [
    (TcpClosed::Full, "full"),
    (TcpClosed::PerClient, "per_client"),
    (TcpClosed::Stalled, "stalled"),
];

/// The per-query counters one thread adds to. Aligned past a cache line (two, where the
/// hardware prefetches in pairs), so no two threads' tallies share one.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Tally {
    queries: [[AtomicU64; RCODES.len()]; TYPES.len()],
    choices: [AtomicU64; CHOICES.len()],
}

impl Tally {
    /// One response, to a query of `qtype` (none when the question was unreadable).
    pub fn answered(&self, qtype: Option<WireType>, rcode: ResponseCode) {
        let by_type = TYPES
            .iter()
            .position(|(_, t)| t.is_some() && *t == qtype)
            .unwrap_or(TYPES.len() - 1);
        let by_rcode = RCODES
            .iter()
            .position(|(_, r)| *r == Some(rcode))
            .unwrap_or(RCODES.len() - 1);
        self.queries[by_type][by_rcode].fetch_add(1, Ordering::Relaxed);
    }

    pub fn chose(&self, choice: Choice) {
        let index = CHOICES
            .iter()
            .position(|(c, _, _)| *c == choice)
            .expect("every choice is listed");
        self.choices[index].fetch_add(1, Ordering::Relaxed);
    }
}

/// The counters of one server.
#[derive(Debug)]
pub struct Stats {
    /// One per answering thread (see [`Stats::tally`]).
    tallies: Box<[Tally]>,
    /// Responses held back by rate limiting: dropped, and sent truncated (slipped).
    rate_limited: [AtomicU64; 2],
    tcp_closed: [AtomicU64; TCP_CLOSED.len()],
}

impl Default for Stats {
    fn default() -> Self {
        Stats::with_tallies(1)
    }
}

impl Stats {
    /// Counters with `count` tallies (at least one), for as many threads answering at once.
    pub fn with_tallies(count: usize) -> Self {
        Stats {
            tallies: (0..count.max(1)).map(|_| Tally::default()).collect(),
            rate_limited: Default::default(),
            tcp_closed: Default::default(),
        }
    }

    /// The tally thread `index` adds to (indices past the last share it).
    pub fn tally(&self, index: usize) -> &Tally {
        &self.tallies[index.min(self.tallies.len() - 1)]
    }

    /// One response counted on the first tally (for callers with no thread of their own).
    pub fn answered(&self, qtype: Option<WireType>, rcode: ResponseCode) {
        self.tallies[0].answered(qtype, rcode);
    }

    /// One dynamic answer counted on the first tally.
    pub fn chose(&self, choice: Choice) {
        self.tallies[0].chose(choice);
    }

    /// A response held back by rate limiting.
    pub fn rate_limited(&self, verdict: Verdict) {
        let index = match verdict {
            Verdict::Send => return,
            Verdict::Drop => 0,
            Verdict::Slip => 1,
        };
        self.rate_limited[index].fetch_add(1, Ordering::Relaxed);
    }

    /// A TCP connection the server closed of its own accord.
    pub fn tcp_closed(&self, why: TcpClosed) {
        let index = TCP_CLOSED
            .iter()
            .position(|(w, _)| *w == why)
            .expect("every reason is listed");
        self.tcp_closed[index].fetch_add(1, Ordering::Relaxed);
    }

    /// Responses held back by rate limiting: (dropped, slipped).
    pub fn rate_limited_counts(&self) -> (u64, u64) {
        (
            self.rate_limited[0].load(Ordering::Relaxed),
            self.rate_limited[1].load(Ordering::Relaxed),
        )
    }

    /// Queries answered with `rcode` to a query of type `qtype` (names as in the metrics).
    pub fn queries(&self, qtype: &str, rcode: &str) -> u64 {
        let by_type = TYPES.iter().position(|(name, _)| *name == qtype);
        let by_rcode = RCODES.iter().position(|(name, _)| *name == rcode);
        match (by_type, by_rcode) {
            (Some(t), Some(r)) => self.summed(|tally| &tally.queries[t][r]),
            _ => 0,
        }
    }

    /// One counter summed over the tallies.
    fn summed(&self, counter: impl Fn(&Tally) -> &AtomicU64) -> u64 {
        self.tallies
            .iter()
            .map(|tally| counter(tally).load(Ordering::Relaxed))
            .sum()
    }

    /// The counters in the Prometheus text format; series that are still zero are left out.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP meridian_dns_queries_total DNS responses by query type and response code.\n",
        );
        out.push_str("# TYPE meridian_dns_queries_total counter\n");
        for (t, (qtype, _)) in TYPES.iter().enumerate() {
            for (r, (rcode, _)) in RCODES.iter().enumerate() {
                let n = self.summed(|tally| &tally.queries[t][r]);
                if n > 0 {
                    let _ = writeln!(
                        out,
                        "meridian_dns_queries_total{{qtype=\"{qtype}\",rcode=\"{rcode}\"}} {n}"
                    );
                }
            }
        }
        out.push_str(
            "# HELP meridian_dns_choices_total Dynamic answers by how they were chosen.\n",
        );
        out.push_str("# TYPE meridian_dns_choices_total counter\n");
        for (index, (_, policy, by)) in CHOICES.iter().enumerate() {
            let n = self.summed(|tally| &tally.choices[index]);
            if n > 0 {
                let _ = writeln!(
                    out,
                    "meridian_dns_choices_total{{policy=\"{policy}\",by=\"{by}\"}} {n}"
                );
            }
        }
        out.push_str(
            "# HELP meridian_dns_rate_limited_total UDP responses held back by rate limiting.\n",
        );
        out.push_str("# TYPE meridian_dns_rate_limited_total counter\n");
        let (dropped, slipped) = self.rate_limited_counts();
        let _ = writeln!(
            out,
            "meridian_dns_rate_limited_total{{action=\"dropped\"}} {dropped}"
        );
        let _ = writeln!(
            out,
            "meridian_dns_rate_limited_total{{action=\"slipped\"}} {slipped}"
        );
        out.push_str(
            "# HELP meridian_dns_tcp_closed_total TCP connections the server closed: refused when full or when the client held its share, or stalled answers.\n",
        );
        out.push_str("# TYPE meridian_dns_tcp_closed_total counter\n");
        for (index, (_, why)) in TCP_CLOSED.iter().enumerate() {
            let n = self.tcp_closed[index].load(Ordering::Relaxed);
            let _ = writeln!(out, "meridian_dns_tcp_closed_total{{why=\"{why}\"}} {n}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_land_in_their_series() {
        let stats = Stats::default();
        stats.answered(Some(WireType::A), ResponseCode::NoError);
        stats.answered(Some(WireType::A), ResponseCode::NoError);
        stats.answered(Some(WireType::MX), ResponseCode::NXDomain);
        stats.answered(None, ResponseCode::FormErr);
        stats.chose(Choice::GeoCountry);
        assert_eq!(stats.queries("A", "NOERROR"), 2);
        assert_eq!(stats.queries("other", "NXDOMAIN"), 1);
        assert_eq!(stats.queries("other", "FORMERR"), 1);
        let text = stats.render();
        assert!(text.contains("meridian_dns_queries_total{qtype=\"A\",rcode=\"NOERROR\"} 2\n"));
        assert!(text.contains("meridian_dns_choices_total{policy=\"geo\",by=\"country\"} 1\n"));
        assert!(
            !text.contains("weighted"),
            "zero series are left out: {text}"
        );
    }

    #[test]
    fn each_thread_counts_on_its_own_tally_and_the_reader_sees_their_sum() {
        let stats = Stats::with_tallies(3);
        std::thread::scope(|scope| {
            for index in 0..5 {
                let stats = &stats;
                scope.spawn(move || {
                    for _ in 0..1000 {
                        stats
                            .tally(index)
                            .answered(Some(WireType::A), ResponseCode::NoError);
                        stats.tally(index).chose(Choice::Weighted);
                    }
                });
            }
        });
        assert_eq!(stats.queries("A", "NOERROR"), 5000);
        assert!(
            stats
                .render()
                .contains("meridian_dns_choices_total{policy=\"weighted\",by=\"drawn\"} 5000\n")
        );
        // Threads past the last tally share it; none is lost.
        assert_eq!(
            stats.tally(2).queries[0][0].load(Ordering::Relaxed),
            3000,
            "threads 2, 3 and 4 on the last tally"
        );
        assert!(std::mem::align_of::<Tally>() >= 128);
    }
}
