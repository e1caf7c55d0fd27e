//! Multi-vantage health: every cluster's agent probes every leaf, and the hub decides. A leaf
//! is unhealthy when at least `threshold_percent` of the clusters that have judged it see it
//! unhealthy, so a failure seen from one vantage point does not take a leaf out of DNS. A leaf
//! no cluster has judged yet has no verdict (it is not published until a probe passes).

/// One cluster's view of a leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterView {
    pub cluster: String,
    /// `None` until the cluster's probe has judged the leaf.
    pub healthy: Option<bool>,
}

/// The hub's verdict on a leaf, and the counts behind it (for probe status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `None` when no cluster has judged the leaf yet.
    pub healthy: Option<bool>,
    pub unhealthy_views: usize,
    pub judging: usize,
}

/// The default `MultiClusterFailureThreshold`.
pub const DEFAULT_THRESHOLD_PERCENT: u32 = 66;

pub fn aggregate(views: &[ClusterView], threshold_percent: u32) -> Verdict {
    let judging = views.iter().filter(|v| v.healthy.is_some()).count();
    let unhealthy_views = views.iter().filter(|v| v.healthy == Some(false)).count();
    let healthy = (judging > 0).then(|| {
        // unhealthy / judging < threshold, in integers.
        (unhealthy_views as u64) * 100 < u64::from(threshold_percent) * judging as u64
    });
    Verdict {
        healthy,
        unhealthy_views,
        judging,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn views(states: &[Option<bool>]) -> Vec<ClusterView> {
        states
            .iter()
            .enumerate()
            .map(|(i, healthy)| ClusterView {
                cluster: format!("c{i}"),
                healthy: *healthy,
            })
            .collect()
    }

    #[test]
    fn one_vantage_point_does_not_decide_two_of_three_do() {
        let (ok, bad) = (Some(true), Some(false));
        let cases: [(&[Option<bool>], Option<bool>); 7] = [
            (&[ok, ok, ok], Some(true)),
            (&[bad, ok, ok], Some(true)),
            (&[bad, bad, ok], Some(false)),
            (&[bad, bad, bad], Some(false)),
            (&[None, None, None], None),
            (&[bad, None, None], Some(false)),
            (&[bad, ok, None], Some(true)),
        ];
        for (states, expected) in cases {
            assert_eq!(
                aggregate(&views(states), DEFAULT_THRESHOLD_PERCENT).healthy,
                expected,
                "{states:?}"
            );
        }
        let verdict = aggregate(&views(&[bad, bad, ok]), DEFAULT_THRESHOLD_PERCENT);
        assert_eq!((verdict.unhealthy_views, verdict.judging), (2, 3));
        assert_eq!(
            aggregate(&views(&[bad, ok]), 50).healthy,
            Some(false),
            "the threshold is inclusive"
        );
    }
}
