//! Whether an object as cached already says what a server-side apply would write, so a
//! steady controller writes nothing.
//!
//! The comparison is "contains", not "equals": the API server adds defaults, metadata and other
//! managers' fields, none of which an apply of ours would change. Lists must match element by
//! element (an apply replaces an atomic list, and a list of ours that grew or shrank is a
//! change).

use serde::Serialize;
use serde_json::Value;

/// Whether `stored` holds every field of `wanted` with the same value.
pub fn holds(stored: &Value, wanted: &Value) -> bool {
    match (stored, wanted) {
        (Value::Object(stored), Value::Object(wanted)) => wanted.iter().all(|(key, value)| {
            match stored.get(key) {
                Some(have) => holds(have, value),
                // An apply of a null removes the field: absent already holds it.
                None => value.is_null(),
            }
        }),
        (Value::Array(stored), Value::Array(wanted)) => {
            stored.len() == wanted.len() && stored.iter().zip(wanted).all(|(s, w)| holds(s, w))
        }
        (stored, wanted) => stored == wanted,
    }
}

/// Whether the cached `object` already holds what applying `wanted` would write.
pub fn already_applied(object: Option<&impl Serialize>, wanted: &Value) -> bool {
    object
        .and_then(|object| serde_json::to_value(object).ok())
        .is_some_and(|stored| holds(&stored, wanted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stored_object_holds_what_it_has_beside_defaults_and_other_fields() {
        let stored = json!({
            "metadata": { "name": "w", "uid": "1", "labels": { "a": "1", "b": "2" } },
            "spec": { "workload": { "manifests": [{ "kind": "Gateway", "spec": { "x": 1 } }] },
                      "deleteOption": { "propagationPolicy": "Foreground" } },
        });
        let cases = [
            (json!({ "metadata": { "name": "w" } }), true, "a subset"),
            (
                json!({ "metadata": { "labels": { "a": "1" } } }),
                true,
                "some labels",
            ),
            (
                json!({ "metadata": { "labels": { "a": "2" } } }),
                false,
                "a changed label",
            ),
            (
                json!({ "metadata": { "labels": { "c": "3" } } }),
                false,
                "a new label",
            ),
            (
                json!({ "metadata": { "labels": { "c": null } } }),
                true,
                "a removed label that is gone",
            ),
            (
                json!({ "metadata": { "labels": { "a": null } } }),
                false,
                "a removed label that is there",
            ),
            (
                json!({ "spec": { "workload": { "manifests": [{ "kind": "Gateway" }] } } }),
                true,
                "a list element's subset",
            ),
            (
                json!({ "spec": { "workload": { "manifests": [{ "kind": "Gateway" }, { "kind": "Secret" }] } } }),
                false,
                "a longer list",
            ),
            (
                json!({ "spec": { "workload": { "manifests": [] } } }),
                false,
                "a shorter list",
            ),
            (
                json!({ "spec": { "workload": { "manifests": [{ "spec": { "x": 2 } }] } } }),
                false,
                "a changed value inside a list",
            ),
            (json!({ "spec": "flat" }), false, "a different shape"),
        ];
        for (wanted, expected, case) in cases {
            assert_eq!(holds(&stored, &wanted), expected, "{case}");
        }
    }

    #[test]
    fn nothing_cached_holds_nothing() {
        assert!(!already_applied(None::<&Value>, &json!({})));
        assert!(already_applied(Some(&json!({ "a": 1 })), &json!({})));
    }
}
