//! What a query is answered with, below both answer paths: the query's context, and the GEO
//! or weighted choice among the records of one name and type.

use std::net::IpAddr;

use ipnet::IpNet;
use rand::Rng;

use meridian_dns::model::{Endpoint, GEO_CODE, WEIGHT};
use meridian_dns::tree::CATCH_ALL_GEO;
use meridian_dns::wire::TsigKey;

use crate::geo::{GeoDb, Location};
use crate::stats::{Choice, Tally};

/// The longest CNAME chain followed inside a zone.
pub(crate) const MAX_CHAIN: usize = 16;
/// The UDP payload size the server advertises (the DNS flag day 2020 value).
pub(crate) const SERVER_UDP_PAYLOAD: u16 = 1232;

/// How the query came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// What the server knows about the query besides its bytes.
#[derive(Debug, Clone, Copy)]
pub struct QueryContext<'a> {
    pub source: IpAddr,
    pub transport: Transport,
    pub geo: Option<&'a GeoDb>,
    /// Networks allowed to transfer zones (AXFR over TCP).
    pub transfer_allowed: &'a [IpNet],
    /// Where answers are counted, if anywhere.
    pub stats: Option<&'a Tally>,
    /// Keys that sign requests (TSIG): a request signed with one gets signed responses and
    /// may transfer zones.
    pub tsig_keys: &'a [TsigKey],
    /// The secret of this server's DNS cookies; none answers without cookies.
    pub cookie_secret: Option<&'a [u8]>,
    /// Unix time, seconds (TSIG and cookie times).
    pub now: u64,
}

/// What a choice among the records of one name and type needs to know of each record.
pub(crate) trait Candidate {
    fn set_identifier(&self) -> Option<&str>;
    fn geo_code(&self) -> Option<&str>;
    /// The weight; 1 when it has none or it does not parse.
    fn weight(&self) -> u64;
}

impl Candidate for &Endpoint {
    fn set_identifier(&self) -> Option<&str> {
        self.set_identifier.as_deref()
    }

    fn geo_code(&self) -> Option<&str> {
        self.property(GEO_CODE)
    }

    fn weight(&self) -> u64 {
        self.property(WEIGHT)
            .and_then(|w| w.parse::<u64>().ok())
            .unwrap_or(1)
    }
}

/// Which records answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chosen {
    /// All of them: they are plain.
    All,
    One(usize),
    None,
}

/// The records to answer with among those of one name and type: all of them when they are
/// plain, one GEO match, or one drawn by weight; and how a dynamic answer was chosen.
pub(crate) fn choose_among<'l, C: Candidate>(
    records: &[C],
    location: impl FnOnce() -> Option<&'l Location>,
    rng: &mut impl Rng,
) -> (Chosen, Option<Choice>) {
    if records.iter().all(|r| r.set_identifier().is_none()) {
        return (Chosen::All, None);
    }
    if records.iter().any(|r| r.geo_code().is_some()) {
        // Only a GEO choice needs the client's location.
        let location = location();
        let with_code = |code: Option<&str>, choice: Choice| {
            code.and_then(|code| records.iter().position(|r| r.geo_code() == Some(code)))
                .map(|index| (index, choice))
        };
        let chosen = with_code(
            location.and_then(|l| l.country.as_deref()),
            Choice::GeoCountry,
        )
        .or_else(|| {
            with_code(
                location.and_then(|l| l.continent.as_deref()),
                Choice::GeoContinent,
            )
        })
        .or_else(|| with_code(Some(CATCH_ALL_GEO), Choice::GeoCatchAll))
        // No catch-all: the lowest set identifier, so the answer is never empty and stable.
        .or_else(|| {
            (0..records.len())
                .min_by_key(|&i| records[i].set_identifier())
                .map(|index| (index, Choice::GeoFallback))
        });
        return chosen.map_or((Chosen::None, None), |(index, choice)| {
            (Chosen::One(index), Some(choice))
        });
    }
    let drawn = Some(Choice::Weighted);
    let total: u64 = records.iter().map(Candidate::weight).sum();
    if total == 0 {
        return (Chosen::One(rng.random_range(0..records.len())), drawn);
    }
    let mut draw = rng.random_range(0..total);
    for (index, record) in records.iter().enumerate() {
        let w = record.weight();
        if draw < w {
            return (Chosen::One(index), drawn);
        }
        draw -= w;
    }
    (Chosen::One(records.len() - 1), drawn)
}

/// [`choose_among`] for endpoints, with the location known.
#[cfg(test)]
pub(crate) fn choose<'a>(
    records: &[&'a Endpoint],
    location: Option<&Location>,
    rng: &mut impl Rng,
) -> (Vec<&'a Endpoint>, Option<Choice>) {
    let (chosen, choice) = choose_among(records, || location, rng);
    let chosen = match chosen {
        Chosen::All => records.to_vec(),
        Chosen::One(index) => vec![records[index]],
        Chosen::None => Vec::new(),
    };
    (chosen, choice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::model::RecordType;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn weighted(set: &str, weight: u32) -> Endpoint {
        Endpoint::new(
            "default.klb.example.com",
            RecordType::Cname,
            [format!("{set}.example.com")],
            60,
        )
        .with_set_identifier(set)
        .with_property(WEIGHT, weight.to_string())
    }

    fn geo(code: &str) -> Endpoint {
        Endpoint::new(
            "klb.example.com",
            RecordType::Cname,
            [format!("{}.klb.example.com", code.to_lowercase())],
            300,
        )
        .with_set_identifier(code)
        .with_property(GEO_CODE, code)
    }

    #[test]
    fn weight_zero_is_never_chosen_while_another_is_positive() {
        let records = [weighted("a", 0), weighted("b", 5)];
        let refs: Vec<&Endpoint> = records.iter().collect();
        let mut rng = SmallRng::seed_from_u64(7);
        assert!(
            (0..1000)
                .all(|_| choose(&refs, None, &mut rng).0[0].set_identifier.as_deref() == Some("b"))
        );
        let zeros = [weighted("a", 0), weighted("b", 0)];
        let refs: Vec<&Endpoint> = zeros.iter().collect();
        assert_eq!(
            choose(&refs, None, &mut rng).0.len(),
            1,
            "all zero: still one answer"
        );
    }

    #[test]
    fn geo_matches_country_then_continent_then_catch_all_then_lowest() {
        let mut catch_all = geo("IE");
        catch_all.set_identifier = Some("default".into());
        catch_all.provider_specific = vec![meridian_dns::model::ProviderSpecific {
            name: GEO_CODE.into(),
            value: "*".into(),
        }];
        let records = [geo("IE"), geo("US"), geo("GEO-EU"), catch_all];
        let refs: Vec<&Endpoint> = records.iter().collect();
        let mut rng = SmallRng::seed_from_u64(1);
        let at = |country: Option<&str>, continent: Option<&str>| Location {
            country: country.and_then(crate::GeoCode::new),
            continent: continent.and_then(crate::GeoCode::new),
        };
        let pick = |location: Option<Location>, rng: &mut SmallRng| {
            choose(&refs, location.as_ref(), rng).0[0]
                .set_identifier
                .clone()
                .unwrap()
        };
        assert_eq!(pick(Some(at(Some("US"), Some("GEO-NA"))), &mut rng), "US");
        assert_eq!(
            pick(Some(at(Some("FR"), Some("GEO-EU"))), &mut rng),
            "GEO-EU"
        );
        assert_eq!(
            pick(Some(at(Some("JP"), Some("GEO-AS"))), &mut rng),
            "default"
        );
        assert_eq!(pick(None, &mut rng), "default");
        let no_catch_all: Vec<&Endpoint> = records[..3].iter().collect();
        assert_eq!(
            choose(&no_catch_all, None, &mut rng).0[0]
                .set_identifier
                .as_deref(),
            Some("GEO-EU"),
            "lowest set identifier"
        );
    }
}
