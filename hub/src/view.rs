//! The hub's live, read-only view: zones → hosts → each host's tree drawn as SVG (health per
//! leaf, weights as shares, GEO branches, silent and draining clusters), and the recent changes
//! to DNS with their times and reasons. Server-rendered HTML and SVG, no script, no write
//! action, on a port of its own (never the DNS port). Everything drawn comes from
//! `crate::insight`, the same views `meridian-hub explain` prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::insight::{FleetSnapshot, HostView, host_views};
use meridian_controllers::Context;
use meridian_controllers::runtime::journal::Entry;
use meridian_dns::model::{Endpoint, GEO_CODE, PRIORITY, RecordType, WEIGHT};
use tokio::net::TcpListener;

use crate::http;

/// Serves the view on `listener`, behind `guard`, until the task is aborted.
pub async fn serve(listener: TcpListener, guard: Option<http::Guard>, ctx: Arc<Context>) {
    http::serve(listener, guard, move |path| page(&ctx, path)).await;
}

fn page(ctx: &Context, path: &str) -> http::Response {
    let snapshot =
        FleetSnapshot::from_caches(&ctx.caches, (ctx.clock)(), ctx.config.heartbeat_timeout);
    let views = host_views(&snapshot, None);
    let path = path.split('?').next().unwrap_or("/");
    if path == "/" {
        return http::Response::html(index(&views, &ctx.journal.recent()));
    }
    if let Some(record) = path.strip_prefix("/hosts/") {
        let (record, svg) = match record.strip_suffix(".svg") {
            Some(record) => (record, true),
            None => (record, false),
        };
        if let Some(view) = views.iter().find(|v| v.record == record) {
            return if svg {
                http::Response::new("200 OK", "image/svg+xml", draw_tree(view))
            } else {
                let changes: Vec<Entry> = ctx
                    .journal
                    .recent()
                    .into_iter()
                    .filter(|e| e.record == view.record)
                    .collect();
                http::Response::html(host_page(view, &changes))
            };
        }
    }
    http::Response::new("404 Not Found", "text/plain", "not found\n".into())
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f0f0f0}.healthy{color:#1a7f37}.unhealthy{color:#cf222e;font-weight:bold}.awaiting,.unchecked{color:#777}.warn{color:#9a6700;font-weight:bold}code{font-size:90%}";

fn document(title: &str, body: &str) -> String {
    format!(
        // Live without a script: the browser asks again every 10 s.
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"10\"><title>{}</title><style>{STYLE}</style></head><body>{body}</body></html>",
        escape(title)
    )
}

fn index(views: &[HostView], changes: &[Entry]) -> String {
    let mut by_zone: BTreeMap<&str, Vec<&HostView>> = BTreeMap::new();
    for view in views {
        by_zone.entry(view.zone.as_str()).or_default().push(view);
    }
    let mut body = String::from(
        "<h1>Meridian: live DNS</h1><p>Read-only. Every page is drawn from the hub's watch caches when asked.</p>",
    );
    if by_zone.is_empty() {
        body.push_str("<p>No DNSRecord yet.</p>");
    }
    for (zone, hosts) in &by_zone {
        let zone = if zone.is_empty() {
            "(zone missing)"
        } else {
            zone
        };
        let _ = write!(
            body,
            "<h2 class=\"zone\">{}</h2><table><tr><th>host</th><th>record</th><th>state</th><th>leaves healthy / published / all</th><th>clusters</th></tr>",
            escape(zone)
        );
        for view in hosts {
            let healthy = view
                .leaves
                .iter()
                .filter(|l| l.verdict == "healthy")
                .count();
            let published = view.leaves.iter().filter(|l| l.published).count();
            let mut state = match view.ready {
                Some(true) => "<span class=\"healthy\">Ready</span>".to_string(),
                Some(false) => format!(
                    "<span class=\"unhealthy\">{}</span>",
                    escape(&view.ready_reason)
                ),
                None => "<span class=\"awaiting\">pending</span>".to_string(),
            };
            if view.held_plan.is_some() {
                state.push_str(" <span class=\"warn\">plan held</span>");
            }
            if !view.other_owners.is_empty() {
                state.push_str(" <span class=\"warn\">conflict</span>");
            }
            let clusters: Vec<String> = view.clusters.iter().map(cluster_badge).collect();
            let _ = write!(
                body,
                "<tr class=\"host\"><td><a href=\"/hosts/{record}\">{host}</a></td><td><code>{record}</code></td><td>{state}</td><td>{healthy} / {published} / {}</td><td>{}</td></tr>",
                view.leaves.len(),
                clusters.join(", "),
                record = escape(&view.record),
                host = escape(&view.host),
            );
        }
        body.push_str("</table>");
    }
    body.push_str("<h2>Recent changes</h2>");
    body.push_str(&changes_table(changes));
    document("Meridian: live DNS", &body)
}

fn cluster_badge(cluster: &crate::insight::ClusterState) -> String {
    let mut badge = escape(&cluster.name);
    if cluster.silent {
        badge.push_str(" <span class=\"warn\">silent</span>");
    }
    if let Some((percent, phase)) = &cluster.draining {
        let _ = write!(
            badge,
            " <span class=\"warn\">draining {percent}% ({})</span>",
            escape(phase)
        );
    }
    badge
}

fn changes_table(changes: &[Entry]) -> String {
    if changes.is_empty() {
        return "<p>No change published by this replica yet (a standby's list starts when it leads).</p>".into();
    }
    let mut out = String::from(
        "<table class=\"changes\"><tr><th>time (UTC)</th><th>host</th><th>records</th><th>why</th></tr>",
    );
    for change in changes {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            change.at.strftime("%Y-%m-%d %H:%M:%S"),
            escape(&change.host),
            escape(&change.changes),
            escape(&change.reason)
        );
    }
    out.push_str("</table>");
    out
}

fn host_page(view: &HostView, changes: &[Entry]) -> String {
    let mut body = format!(
        "<p><a href=\"/\">all hosts</a></p><h1>{}</h1><p>DNSRecord <code>{}</code> in zone {}</p>",
        escape(&view.host),
        escape(&view.record),
        escape(&view.zone)
    );
    let _ = write!(
        body,
        "<p>Ready: <b>{}</b> {}: {}</p>",
        match view.ready {
            Some(true) => "yes",
            Some(false) => "no",
            None => "not yet",
        },
        escape(&view.ready_reason),
        escape(&view.ready_message)
    );
    if let Some(health) = &view.health_message {
        let _ = write!(body, "<p>Health: {}</p>", escape(health));
    }
    if let Some(held) = &view.held_plan {
        let _ = write!(body, "<p class=\"warn\">Plan held: {}</p>", escape(held));
    }
    if !view.other_owners.is_empty() {
        let _ = write!(
            body,
            "<p class=\"warn\">Other owners publish into these names: {}</p>",
            escape(&view.other_owners.join(", "))
        );
    }
    body.push_str("<h2>Tree</h2>");
    body.push_str(&draw_tree(view));
    body.push_str("<h2>Leaves</h2><table class=\"leaves\"><tr><th>address</th><th>cluster</th><th>tier</th><th>verdict</th><th>published</th><th>votes</th></tr>");
    for leaf in &view.leaves {
        let votes: Vec<String> = leaf
            .votes
            .iter()
            .map(|v| {
                let mut vote = format!(
                    "{}: {}",
                    escape(&v.cluster),
                    if v.healthy { "passing" } else { "failing" }
                );
                if !v.healthy {
                    let _ = write!(vote, ", {} in a row", v.consecutive_failures);
                    if let Some(since) = v.failing_since {
                        let _ = write!(vote, " since {}", since.strftime("%H:%M:%S"));
                    }
                }
                if let Some(reason) = v.reason.as_deref().filter(|r| !r.is_empty()) {
                    let _ = write!(vote, " ({})", escape(reason));
                }
                vote
            })
            .collect();
        let _ = write!(
            body,
            "<tr class=\"leaf\" data-address=\"{address}\" data-verdict=\"{verdict}\"><td>{address}</td><td>{}</td><td>{}</td><td class=\"{verdict}\">{verdict}</td><td>{}</td><td>{}</td></tr>",
            escape(leaf.cluster.as_deref().unwrap_or("?")),
            leaf.tier.map_or(String::new(), |t| t.to_string()),
            if leaf.published {
                "yes"
            } else {
                "<span class=\"unhealthy\">no</span>"
            },
            votes.join("<br>"),
            address = escape(&leaf.address),
            verdict = leaf.verdict,
        );
    }
    body.push_str("</table><h2>Clusters</h2><ul>");
    for cluster in &view.clusters {
        let heard = cluster
            .last_heard_seconds
            .map_or("never heard".to_string(), |s| format!("heard {s}s ago"));
        let _ = write!(body, "<li>{}: {heard}</li>", cluster_badge(cluster));
    }
    body.push_str("</ul><h2>Recent changes</h2>");
    body.push_str(&changes_table(changes));
    document(&view.host, &body)
}

/// A node of the drawing: a record, or an address (or gateway hostname) it answers with.
struct Drawn {
    label: String,
    /// The edge's label from the parent: GEO code, weight share.
    edge: String,
    /// `healthy`, `unhealthy`, `awaiting`, `unchecked` for leaves; `record` otherwise.
    class: String,
    published: bool,
    depth: usize,
    row: f64,
    parent: Option<usize>,
}

const COLUMN: f64 = 340.0;
const ROW: f64 = 46.0;
const BOX_WIDTH: f64 = 250.0;
const BOX_HEIGHT: f64 = 34.0;

/// The most nodes one drawing holds. A record's tree is the hub's own output, but its input is
/// a tenant's: 17 levels of 4 weighted CNAMEs, each level's four pointing at the next name,
/// would otherwise draw 4^17 nodes on a request any pod can make.
pub const MAX_NODES: usize = 2_000;

/// The drawing as it is placed.
struct Walk {
    nodes: Vec<Drawn>,
    next_row: f64,
    /// Names whose records are already drawn: a name reached again (by another branch, or
    /// by a loop) is drawn once, and referred to after that.
    expanded: std::collections::HashSet<String>,
    /// Whether [`MAX_NODES`] cut the drawing short.
    truncated: bool,
}

/// The host's tree as SVG: the records the hub wants, left to right from the host; records
/// and leaves not published now are drawn dashed and pale.
pub fn draw_tree(view: &HostView) -> String {
    let mut walk = Walk {
        nodes: Vec::new(),
        next_row: 0.0,
        expanded: std::collections::HashSet::from([view.host.clone()]),
        truncated: false,
    };
    let roots: Vec<&Endpoint> = view
        .wanted
        .iter()
        .filter(|e| e.dns_name == view.host)
        .collect();
    for root in roots {
        place(view, root, String::new(), None, 0, &mut walk);
    }
    if walk.truncated {
        let row = walk.next_row;
        walk.next_row += 1.0;
        walk.nodes.push(Drawn {
            label: format!("more not drawn\n(over {MAX_NODES} nodes)"),
            edge: String::new(),
            class: "unchecked".into(),
            published: false,
            depth: 0,
            row,
            parent: None,
        });
    }
    let Walk {
        nodes, next_row, ..
    } = walk;
    let depth = nodes.iter().map(|n| n.depth).max().unwrap_or(0) as f64 + 1.0;
    let width = depth * COLUMN + 20.0;
    let height = (next_row.max(1.0)) * ROW + 20.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"tree\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"monospace\" font-size=\"11\">"
    );
    let position = |node: &Drawn| (10.0 + node.depth as f64 * COLUMN, 10.0 + node.row * ROW);
    for node in &nodes {
        if let Some(parent) = node.parent {
            let (x1, y1) = position(&nodes[parent]);
            let (x2, y2) = position(node);
            let _ = write!(
                svg,
                "<line x1=\"{}\" y1=\"{}\" x2=\"{x2}\" y2=\"{}\" stroke=\"#999\"/>",
                x1 + BOX_WIDTH,
                y1 + BOX_HEIGHT / 2.0,
                y2 + BOX_HEIGHT / 2.0
            );
            if !node.edge.is_empty() {
                let _ = write!(
                    svg,
                    "<text x=\"{}\" y=\"{}\" fill=\"#555\" font-size=\"10\">{}</text>",
                    x2 - (COLUMN - BOX_WIDTH) + 6.0,
                    y2 + BOX_HEIGHT / 2.0 - 3.0,
                    escape(&node.edge)
                );
            }
        }
    }
    for node in &nodes {
        let (x, y) = position(node);
        let (fill, stroke) = match node.class.as_str() {
            "healthy" => ("#dafbe1", "#1a7f37"),
            "unhealthy" => ("#ffebe9", "#cf222e"),
            "awaiting" | "unchecked" => ("#f6f8fa", "#8c959f"),
            _ => ("#ddf4ff", "#0969da"),
        };
        let dash = if node.published {
            ""
        } else {
            " stroke-dasharray=\"4 3\" opacity=\"0.6\""
        };
        let _ = write!(
            svg,
            "<g class=\"node {}\" data-published=\"{}\"><rect x=\"{x}\" y=\"{y}\" width=\"{BOX_WIDTH}\" height=\"{BOX_HEIGHT}\" rx=\"4\" fill=\"{fill}\" stroke=\"{stroke}\"{dash}/>",
            node.class, node.published
        );
        for (line, text) in node.label.lines().take(2).enumerate() {
            let _ = write!(
                svg,
                "<text x=\"{}\" y=\"{}\">{}</text>",
                x + 6.0,
                y + 14.0 + line as f64 * 13.0,
                escape(text)
            );
        }
        svg.push_str("</g>");
    }
    svg.push_str("</svg>");
    svg
}

/// Places `record` and what it leads to; returns the node's row (its children's middle).
fn place(
    view: &HostView,
    record: &Endpoint,
    edge: String,
    parent: Option<usize>,
    depth: usize,
    walk: &mut Walk,
) -> f64 {
    let now = view.published.iter().find(|p| p.key() == record.key());
    let published = now.is_some();
    // A catch-all whose group fell is published pointing elsewhere: say where it points now.
    let now_points = now
        .and_then(|p| p.targets.first())
        .filter(|target| Some(*target) != record.targets.first())
        .map(|target| format!(" (now → {})", short(target, &view.host)))
        .unwrap_or_default();
    let index = walk.nodes.len();
    walk.nodes.push(Drawn {
        label: match (record.record_type, record.targets.first()) {
            (RecordType::Cname, Some(target)) => format!(
                "{}\nCNAME → {}{now_points}",
                short(&record.dns_name, &view.host),
                short(target, &view.host)
            ),
            (record_type, _) => format!("{}\n{record_type}", short(&record.dns_name, &view.host)),
        },
        edge,
        class: "record".into(),
        published,
        depth,
        row: 0.0,
        parent,
    });
    let mut rows = Vec::new();
    if record.record_type == RecordType::Cname {
        let target = record.targets.first().cloned().unwrap_or_default();
        let children: Vec<&Endpoint> = view
            .wanted
            .iter()
            .filter(|e| e.dns_name == target)
            .collect();
        if !children.is_empty() && !walk.expanded.insert(target.clone()) {
            // Drawn once already (or a loop back up): a reference, not the subtree again.
            rows.push(reference(&target, view, Some(index), depth + 1, walk));
        } else {
            let total: u64 = children
                .iter()
                .filter_map(|c| c.property(WEIGHT)?.parse::<u64>().ok())
                .sum();
            for child in &children {
                if walk.nodes.len() >= MAX_NODES {
                    walk.truncated = true;
                    break;
                }
                let mut edge = match (child.property(GEO_CODE), child.property(WEIGHT)) {
                    (Some(code), _) => format!("geo {code}"),
                    (None, Some(weight)) if total > 0 => {
                        let share =
                            weight.parse::<u64>().unwrap_or(0) as f64 * 100.0 / total as f64;
                        format!("{share:.0}%")
                    }
                    _ => String::new(),
                };
                if let Some(tier) = child.property(PRIORITY) {
                    edge = format!("tier {tier} {edge}");
                }
                rows.push(place(view, child, edge, Some(index), depth + 1, walk));
            }
            if children.is_empty() {
                rows.push(leaf(view, &target, Some(index), depth + 1, walk));
            }
        }
    } else if matches!(record.record_type, RecordType::A | RecordType::Aaaa) {
        for address in &record.targets {
            if walk.nodes.len() >= MAX_NODES {
                walk.truncated = true;
                break;
            }
            rows.push(leaf(view, address, Some(index), depth + 1, walk));
        }
    }
    let row = if rows.is_empty() {
        let row = walk.next_row;
        walk.next_row += 1.0;
        row
    } else {
        (rows[0] + rows[rows.len() - 1]) / 2.0
    };
    walk.nodes[index].row = row;
    row
}

/// A name whose records are drawn elsewhere in the tree.
fn reference(
    name: &str,
    view: &HostView,
    parent: Option<usize>,
    depth: usize,
    walk: &mut Walk,
) -> f64 {
    let row = walk.next_row;
    walk.next_row += 1.0;
    walk.nodes.push(Drawn {
        label: format!("{}\n(drawn above)", short(name, &view.host)),
        edge: String::new(),
        class: "record".into(),
        published: true,
        depth,
        row,
        parent,
    });
    row
}

fn leaf(
    view: &HostView,
    address: &str,
    parent: Option<usize>,
    depth: usize,
    walk: &mut Walk,
) -> f64 {
    let found = view.leaves.iter().find(|l| l.address == address);
    let cluster = found.and_then(|l| l.cluster.as_deref());
    let state = cluster.and_then(|c| view.clusters.iter().find(|s| s.name == c));
    let mut second = format!(
        "{} {}",
        cluster.unwrap_or("?"),
        found.map_or("unchecked", |l| l.verdict)
    );
    if state.is_some_and(|s| s.silent) {
        second.push_str(" silent");
    }
    if let Some((percent, _)) = state.and_then(|s| s.draining.as_ref()) {
        let _ = write!(second, " draining {percent}%");
    }
    let row = walk.next_row;
    walk.next_row += 1.0;
    walk.nodes.push(Drawn {
        label: format!("{address}\n{second}"),
        edge: String::new(),
        class: found.map_or("unchecked", |l| l.verdict).to_string(),
        published: found.is_some_and(|l| l.published),
        depth,
        row,
        parent,
    });
    row
}

/// A name shortened to fit a box: the host's own suffix left out.
fn short(name: &str, host: &str) -> String {
    let base = host.trim_start_matches("*.");
    if name == host {
        return name.to_string();
    }
    name.strip_suffix(base)
        .map_or(name.to_string(), |prefix| format!("{prefix}…"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insight::{ClusterState, LeafView};

    fn cname(name: &str, target: &str, property: Option<(&str, &str)>) -> Endpoint {
        let mut endpoint = Endpoint::new(name, RecordType::Cname, [target.to_string()], 60);
        if let Some((key, value)) = property {
            endpoint = endpoint
                .with_set_identifier(value)
                .with_property(key, value);
        }
        endpoint
    }

    #[test]
    fn the_tree_shows_geo_branches_weight_shares_verdicts_and_what_is_left_out() {
        let host = "api.example.com";
        let wanted = vec![
            cname(host, "klb.api.example.com", None),
            cname(
                "klb.api.example.com",
                "ie.klb.api.example.com",
                Some((GEO_CODE, "IE")),
            ),
            cname(
                "ie.klb.api.example.com",
                "a.klb.api.example.com",
                Some((WEIGHT, "30")),
            ),
            cname(
                "ie.klb.api.example.com",
                "b.klb.api.example.com",
                Some((WEIGHT, "10")),
            ),
            Endpoint::new(
                "a.klb.api.example.com",
                RecordType::A,
                ["192.0.2.1".to_string()],
                60,
            ),
            Endpoint::new(
                "b.klb.api.example.com",
                RecordType::A,
                ["192.0.2.2".to_string()],
                60,
            ),
        ];
        let published = wanted[..3].iter().chain([&wanted[4]]).cloned().collect();
        let leaf =
            |address: &str, cluster: &str, verdict: &'static str, published: bool| LeafView {
                address: address.into(),
                cluster: Some(cluster.into()),
                published,
                tier: None,
                verdict,
                votes: Vec::new(),
            };
        let view = HostView {
            record: "gateways/prod-web-api".into(),
            host: host.into(),
            zone: "example.com".into(),
            ready: Some(true),
            ready_reason: "Published".into(),
            ready_message: String::new(),
            health_message: None,
            held_plan: None,
            other_owners: Vec::new(),
            leaves: vec![
                leaf("192.0.2.1", "spoke-1", "healthy", true),
                leaf("192.0.2.2", "spoke-2", "unhealthy", false),
            ],
            clusters: vec![ClusterState {
                name: "spoke-2".into(),
                last_heard_seconds: Some(400),
                silent: true,
                draining: Some((50, "Draining".into())),
            }],
            wanted,
            published,
        };
        let svg = draw_tree(&view);
        for expected in [
            ">geo IE<",
            ">75%<",
            ">25%<",
            ">192.0.2.2<",
            ">spoke-2 unhealthy silent draining 50%<",
            "class=\"node unhealthy\" data-published=\"false\"",
            "class=\"node healthy\" data-published=\"true\"",
        ] {
            assert!(svg.contains(expected), "{expected} missing from {svg}");
        }
        // The failed leaf, its A record and the weighted CNAME to it are drawn, as not
        // published.
        assert_eq!(svg.matches("data-published=\"false\"").count(), 3, "{svg}");
        let page = host_page(&view, &[]);
        assert!(page.contains("data-verdict=\"unhealthy\""));
        assert!(!page.contains("<script"));
    }

    fn view_of(host: &str, wanted: Vec<Endpoint>) -> HostView {
        HostView {
            record: "mallory/deep".into(),
            host: host.into(),
            zone: "mallory.test".into(),
            ready: Some(true),
            ready_reason: "Published".into(),
            ready_message: String::new(),
            health_message: None,
            held_plan: None,
            other_owners: Vec::new(),
            leaves: Vec::new(),
            clusters: Vec::new(),
            wanted,
            published: Vec::new(),
        }
    }

    #[test]
    fn a_tenants_tree_of_17_levels_of_4_weighted_cnames_draws_each_name_once() {
        // The attack: each level's four weighted CNAMEs all point at the next level's name,
        // which a walk without memory expands 4^17 (17 billion) times.
        let host = "deep.mallory.test";
        let level = |i: usize| {
            if i == 0 {
                host.to_string()
            } else {
                format!("l{i}.mallory.test")
            }
        };
        let mut wanted = Vec::new();
        for i in 0..17 {
            for copy in 0..4 {
                wanted.push(cname(
                    &level(i),
                    &level(i + 1),
                    Some((WEIGHT, &format!("{}", 10 + copy))),
                ));
            }
        }
        wanted.push(Endpoint::new(
            level(17),
            RecordType::A,
            ["192.0.2.1".to_string()],
            60,
        ));
        // And a loop back to the host.
        wanted.push(cname(&level(17), host, Some((WEIGHT, "1"))));
        let svg = draw_tree(&view_of(host, wanted));
        let nodes = svg.matches("<g class=\"node").count();
        // Per level: four CNAMEs, one expanded and three references.
        assert!(nodes <= 17 * 7 + 4, "{nodes} nodes");
        assert!(svg.contains("(drawn above)"));
        assert!(svg.contains(">192.0.2.1<"));
        assert!(!svg.contains("more not drawn"));
    }

    #[test]
    fn a_tree_wider_than_the_budget_is_cut_short_and_says_so() {
        let host = "wide.mallory.test";
        let addresses: Vec<String> = (0..3 * MAX_NODES)
            .map(|i| format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256))
            .collect();
        let wanted = vec![Endpoint::new(host, RecordType::A, addresses, 60)];
        let svg = draw_tree(&view_of(host, wanted));
        let nodes = svg.matches("<g class=\"node").count();
        assert!(nodes <= MAX_NODES + 1, "{nodes} nodes");
        assert!(svg.contains("more not drawn"), "the cut is said");
    }
}
