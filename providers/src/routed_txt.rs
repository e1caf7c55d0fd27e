//! Ownership TXT records of routed records, for providers whose record sets carry no set
//! identifier (Cloud DNS, Azure DNS).
//!
//! A routed record's ownership record cannot be routed itself: every member would carry the
//! same kind of value, and which owner owns which member would be lost. So these providers
//! keep one plain TXT set per name, and a value that belongs to a routed record ends in
//! `;meridian/set-identifier=<id>`. Reading the zone back, such values become TXT records with
//! that set identifier again, and take the routing properties of the record they vouch for.

use std::collections::BTreeMap;

use meridian_dns::model::{Endpoint, ProviderSpecific, RecordKey, RecordType};
use meridian_dns::plan::record_vouched_for;

/// How ownership TXT values of routed records carry their set identifier.
pub(crate) const SET_ID_MARKER: &str = ";meridian/set-identifier=";

/// The value stored for one TXT value of `record`.
pub(crate) fn marked_value(record: &Endpoint, value: &str) -> String {
    match &record.set_identifier {
        Some(id) => format!("{value}{SET_ID_MARKER}{id}"),
        None => value.to_string(),
    }
}

/// The TXT records one stored TXT set at `name` holds: its plain values as one record, and
/// one record per set identifier for marked values.
pub(crate) fn unmarked_records(
    name: &str,
    ttl: u32,
    values: impl IntoIterator<Item = String>,
) -> Vec<Endpoint> {
    let mut plain = Vec::new();
    let mut routed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for value in values {
        match value.rsplit_once(SET_ID_MARKER) {
            Some((value, id)) => routed.entry(id.to_string()).or_default().push(value.into()),
            None => plain.push(value),
        }
    }
    let txt = |values: Vec<String>| Endpoint::new(name, RecordType::Txt, values, ttl);
    (!plain.is_empty())
        .then(|| txt(plain))
        .into_iter()
        .chain(
            routed
                .into_iter()
                .map(|(id, values)| txt(values).with_set_identifier(id)),
        )
        .collect()
}

/// Gives ownership TXT records of routed records the routing properties of the records they
/// vouch for, as the engine wrote them.
pub(crate) fn restore_routing_properties(records: &mut [Endpoint]) {
    let properties: BTreeMap<RecordKey, Vec<ProviderSpecific>> = records
        .iter()
        .filter(|r| r.set_identifier.is_some() && r.record_type != RecordType::Txt)
        .map(|r| (r.key(), r.provider_specific.clone()))
        .collect();
    for record in records {
        if record.record_type == RecordType::Txt
            && record.set_identifier.is_some()
            && let Some(vouched) = record_vouched_for(record)
            && let Some(properties) = properties.get(&vouched)
        {
            record.provider_specific = properties.clone();
        }
    }
}
