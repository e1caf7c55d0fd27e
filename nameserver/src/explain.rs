//! Why a client gets its answer: the walk [`crate::answer`] makes for a query, written down
//! instead of answered. It follows the same CNAME chain through the same zone lookups and makes
//! GEO choices with the same code ([`choose_among`]); where a query draws by weight, it follows
//! every branch with its share instead of drawing one, so the explanation covers every answer
//! the server can give that client.

use std::collections::BTreeMap;

use serde::Serialize;

use meridian_dns::model::{Endpoint, GEO_CODE, RecordType, WEIGHT, is_at_or_below};

use crate::geo::Location;
use crate::query::{Candidate, Chosen, MAX_CHAIN, choose_among};
use crate::stats::Choice;
use crate::zone::{Zone, normalize};

/// One name of the chain: its records of the asked type (or CNAMEs), how the server chooses
/// among them, and where each chosen one leads.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub name: String,
    /// `plain` (every record answers), `geo-country`, `geo-continent`, `geo-catch-all`,
    /// `geo-fallback`, `weighted`; or `nxdomain`, `nodata`, `loop` where the walk ends.
    pub choice: String,
    pub records: Vec<Branch>,
}

/// A record at a step, and whether (and how often) the server answers with it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Branch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_identifier: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub geo_code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<u64>,
    pub record_type: String,
    pub targets: Vec<String>,
    /// The share of this name's answers that are this record: 1 for a GEO match or a plain
    /// record, weight / total for a weighted one, 0 for a record not chosen.
    pub share: f64,
    /// What the chosen CNAME leads to (absent for addresses, records not chosen and names
    /// outside the zone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub then: Option<Box<Step>>,
}

/// The explanation of one query.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub query: String,
    pub query_type: String,
    pub zone: String,
    pub path: Step,
    /// Every address the client can be answered, with the share of its answers that hold it.
    pub answers: BTreeMap<String, f64>,
}

/// How the server chooses for `client` when `host`'s type `record_type` is asked in `zone`.
pub fn explain(
    zone: &Zone,
    host: &str,
    record_type: RecordType,
    client: Option<&Location>,
) -> Explanation {
    let name = normalize(host);
    let path = walk(zone, &name, record_type, client, 0);
    let mut answers = BTreeMap::new();
    collect_answers(&path, 1.0, &mut answers);
    Explanation {
        query: name,
        query_type: record_type.as_str().to_string(),
        zone: zone.apex().to_string(),
        path,
        answers,
    }
}

fn walk(
    zone: &Zone,
    name: &str,
    record_type: RecordType,
    client: Option<&Location>,
    depth: usize,
) -> Step {
    let ended = |choice: &str| Step {
        name: name.to_string(),
        choice: choice.to_string(),
        records: Vec::new(),
    };
    if depth >= MAX_CHAIN {
        return ended("loop");
    }
    let Some(records) = zone.lookup(name) else {
        return ended("nxdomain");
    };
    let cnames: Vec<&Endpoint> = records
        .iter()
        .filter(|r| r.record_type == RecordType::Cname)
        .collect();
    let (candidates, follows) = if !cnames.is_empty() && record_type != RecordType::Cname {
        (cnames, true)
    } else {
        let matching: Vec<&Endpoint> = records
            .iter()
            .filter(|r| r.record_type == record_type)
            .collect();
        (matching, false)
    };
    if candidates.is_empty() {
        return ended("nodata");
    }
    let (chosen, choice) = choose_among(&candidates, || client, &mut NoDraw);
    let total: u64 = candidates.iter().map(Candidate::weight).sum();
    let share_of = |index: usize| -> f64 {
        match (chosen, choice) {
            (Chosen::All, _) => 1.0,
            (_, Some(Choice::Weighted)) if total == 0 => 1.0 / candidates.len() as f64,
            (_, Some(Choice::Weighted)) => candidates[index].weight() as f64 / total as f64,
            (Chosen::One(one), _) if one == index => 1.0,
            _ => 0.0,
        }
    };
    let records = candidates
        .iter()
        .enumerate()
        .map(|(index, record)| {
            let share = share_of(index);
            let then = (follows && share > 0.0)
                .then(|| record.targets.first())
                .flatten()
                .filter(|target| is_at_or_below(target, zone.apex()))
                .map(|target| Box::new(walk(zone, target, record_type, client, depth + 1)));
            Branch {
                set_identifier: record.set_identifier.clone(),
                geo_code: record.property(GEO_CODE).map(str::to_string),
                weight: record
                    .property(WEIGHT)
                    .map(|_| Candidate::weight(record))
                    .filter(|_| choice == Some(Choice::Weighted)),
                record_type: record.record_type.as_str().to_string(),
                targets: record.targets.clone(),
                share,
                then,
            }
        })
        .collect();
    Step {
        name: name.to_string(),
        choice: choice_name(chosen, choice).to_string(),
        records,
    }
}

/// The name of a choice as explanations write it.
fn choice_name(chosen: Chosen, choice: Option<Choice>) -> &'static str {
    match (chosen, choice) {
        (Chosen::All, _) => "plain",
        (_, Some(Choice::GeoCountry)) => "geo-country",
        (_, Some(Choice::GeoContinent)) => "geo-continent",
        (_, Some(Choice::GeoCatchAll)) => "geo-catch-all",
        (_, Some(Choice::GeoFallback)) => "geo-fallback",
        (_, Some(Choice::Weighted)) => "weighted",
        (_, None) => "none",
    }
}

fn collect_answers(step: &Step, share: f64, answers: &mut BTreeMap<String, f64>) {
    for option in step.records.iter().filter(|o| o.share > 0.0) {
        let share = share * option.share;
        match &option.then {
            Some(next) => collect_answers(next, share, answers),
            None => {
                for target in &option.targets {
                    *answers.entry(target.clone()).or_default() += share;
                }
            }
        }
    }
}

/// The random source of an explanation: explanations never draw (a weighted step is followed
/// on every branch), so the value is irrelevant; it only keeps the choice code's signature.
struct NoDraw;

impl rand::RngCore for NoDraw {
    fn next_u32(&mut self) -> u32 {
        0
    }

    fn next_u64(&mut self) -> u64 {
        0
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        dest.fill(0);
    }
}

impl Explanation {
    /// The explanation for a person: the chain with each choice, then the answers.
    pub fn render_text(&self) -> String {
        let mut out = format!("{} {} in zone {}\n", self.query, self.query_type, self.zone);
        render_step(&self.path, "  ", &mut out);
        out.push_str("answers:\n");
        for (address, share) in &self.answers {
            out.push_str(&format!("  {address}  {:.0}%\n", share * 100.0));
        }
        if self.answers.is_empty() {
            out.push_str("  none\n");
        }
        out
    }
}

fn render_step(step: &Step, indent: &str, out: &mut String) {
    out.push_str(&format!("{indent}{}: {}\n", step.name, step.choice));
    for option in &step.records {
        let mut what = format!("{} {}", option.record_type, option.targets.join(", "));
        if let Some(set) = &option.set_identifier {
            what.push_str(&format!(" [set {set}"));
            if let Some(code) = &option.geo_code {
                what.push_str(&format!(", geo {code}"));
            }
            if let Some(weight) = option.weight {
                what.push_str(&format!(", weight {weight}"));
            }
            what.push(']');
        }
        let mark = if option.share > 0.0 {
            format!("{:>4.0}% ->", option.share * 100.0)
        } else {
            "        ".to_string()
        };
        out.push_str(&format!("{indent}  {mark} {what}\n"));
        if let Some(next) = &option.then {
            render_step(next, &format!("{indent}      "), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zone::ZoneConfig;

    fn cname(
        name: &str,
        target: &str,
        set: Option<&str>,
        property: Option<(&str, &str)>,
    ) -> Endpoint {
        let mut endpoint = Endpoint::new(name, RecordType::Cname, [target.to_string()], 60);
        if let Some(set) = set {
            endpoint = endpoint.with_set_identifier(set);
        }
        if let Some((key, value)) = property {
            endpoint = endpoint.with_property(key, value);
        }
        endpoint
    }

    fn a(name: &str, address: &str) -> Endpoint {
        Endpoint::new(name, RecordType::A, [address.to_string()], 60)
    }

    /// api → klb (GEO IE, US, catch-all → IE) → weighted within IE (3:1) → addresses.
    fn zone() -> Zone {
        Zone::new(
            ZoneConfig::new("example.com"),
            1,
            [
                cname("api.example.com", "klb.api.example.com", None, None),
                cname(
                    "klb.api.example.com",
                    "ie.klb.api.example.com",
                    Some("IE"),
                    Some((GEO_CODE, "IE")),
                ),
                cname(
                    "klb.api.example.com",
                    "us.klb.api.example.com",
                    Some("US"),
                    Some((GEO_CODE, "US")),
                ),
                cname(
                    "klb.api.example.com",
                    "ie.klb.api.example.com",
                    Some("default"),
                    Some((GEO_CODE, "*")),
                ),
                cname(
                    "ie.klb.api.example.com",
                    "c1.klb.api.example.com",
                    Some("c1"),
                    Some((WEIGHT, "150")),
                ),
                cname(
                    "ie.klb.api.example.com",
                    "c2.klb.api.example.com",
                    Some("c2"),
                    Some((WEIGHT, "50")),
                ),
                cname(
                    "us.klb.api.example.com",
                    "c3.klb.api.example.com",
                    Some("c3"),
                    Some((WEIGHT, "120")),
                ),
                a("c1.klb.api.example.com", "192.0.2.1"),
                a("c2.klb.api.example.com", "192.0.2.2"),
                a("c3.klb.api.example.com", "192.0.2.3"),
                cname("www.example.com", "elsewhere.example.net", None, None),
            ],
        )
    }

    fn located(country: &str, continent: &str) -> Location {
        Location {
            country: crate::GeoCode::new(country),
            continent: crate::GeoCode::new(continent),
        }
    }

    /// Addresses with the share of answers that hold them.
    type Shares = &'static [(&'static str, f64)];

    #[test]
    fn each_client_gets_the_geo_branch_and_the_weighted_shares_the_server_would_give() {
        let zone = zone();
        // (client, the choice at klb, the answers with their shares)
        let table: [(Option<Location>, &str, Shares); 4] = [
            (
                Some(located("US", "GEO-NA")),
                "geo-country",
                &[("192.0.2.3", 1.0)],
            ),
            (
                Some(located("IE", "GEO-EU")),
                "geo-country",
                &[("192.0.2.1", 0.75), ("192.0.2.2", 0.25)],
            ),
            (
                Some(located("FR", "GEO-EU")),
                "geo-catch-all",
                &[("192.0.2.1", 0.75), ("192.0.2.2", 0.25)],
            ),
            (
                None,
                "geo-catch-all",
                &[("192.0.2.1", 0.75), ("192.0.2.2", 0.25)],
            ),
        ];
        for (client, choice, expected) in table {
            let explained = explain(&zone, "API.example.com.", RecordType::A, client.as_ref());
            assert_eq!(explained.query, "api.example.com");
            let klb = explained.path.records[0]
                .then
                .as_deref()
                .expect("api leads to klb");
            assert_eq!(klb.choice, choice, "{client:?}");
            let expected: BTreeMap<String, f64> =
                expected.iter().map(|(a, s)| (a.to_string(), *s)).collect();
            assert_eq!(explained.answers, expected, "{client:?}");
        }
    }

    #[test]
    fn the_walk_ends_where_the_server_would_stop() {
        let zone = zone();
        let missing = explain(&zone, "nope.example.com", RecordType::A, None);
        assert_eq!(missing.path.choice, "nxdomain");
        assert!(missing.answers.is_empty());
        let no_data = explain(&zone, "c1.klb.api.example.com", RecordType::Aaaa, None);
        assert_eq!(no_data.path.choice, "nodata");
        // A CNAME out of the zone is where the resolver goes on: its target is the answer.
        let outside = explain(&zone, "www.example.com", RecordType::A, None);
        assert_eq!(outside.path.choice, "plain");
        assert_eq!(
            outside.answers,
            BTreeMap::from([("elsewhere.example.net".to_string(), 1.0)])
        );
        let text = explain(&zone, "api.example.com", RecordType::A, None).render_text();
        assert!(text.contains("geo-catch-all"), "{text}");
        assert!(text.contains("weight 150"), "{text}");
        assert!(text.contains("192.0.2.1  75%"), "{text}");
    }
}
