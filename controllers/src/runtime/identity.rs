//! The names Meridian's controllers write under and file objects by: the field manager, the
//! labels and finalizers they set, and the key of an object in logs, metrics and memories.

/// The one field manager every write of these controllers uses (on the hub and, in distributed
/// mode, on a spoke).
pub const FIELD_MANAGER: &str = "meridian-hub";

/// Label on DNSRecords naming the DNSPolicy that owns them.
pub const POLICY_LABEL: &str = "meridian.dev/dns-policy";

/// Label on the DNSRecords a distributed-mode agent writes.
pub const DISTRIBUTED_LABEL: &str = "meridian.dev/distributed";

/// The finalizer on every DNSRecord: its DNS is withdrawn before it goes.
pub const RECORD_FINALIZER: &str = "meridian.dev/dns-record";

/// `namespace/name` of an object, for logs, metrics and the failure map.
pub fn object_key(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(namespace) => format!("{kind}/{namespace}/{name}"),
        None => format!("{kind}/{name}"),
    }
}
