//! Schema fragments shared by several kinds. Each message names the field it is about, because
//! the API server prefixes it with the path of the schema node the rule sits on, which for a
//! rule spanning fields is the parent object, not the field the user has to change.

/// A lowercase DNS name: labels of letters, digits, `-` and `_` (service labels), up to 63
/// characters each, not starting or ending with `-`, optionally ending in a dot.
pub(crate) const DNS_NAME_PATTERN: &str =
    r"^([a-z0-9_]([-a-z0-9_]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([-a-z0-9_]{0,61}[a-z0-9_])?\.?$";

/// Like [`DNS_NAME_PATTERN`], also allowing one leading `*.` wildcard label.
pub(crate) const DNS_NAME_OR_WILDCARD_PATTERN: &str =
    r"^(\*\.)?([a-z0-9_]([-a-z0-9_]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([-a-z0-9_]{0,61}[a-z0-9_])?\.?$";

/// A Go/Kubernetes duration such as `30s`, `1m30s` or `500ms`.
pub(crate) const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";
