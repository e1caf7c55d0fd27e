//! Who may read `/metrics` and the view: a client sends a bearer token, the API server says
//! whose it is (TokenReview) and whether that identity may `get` the page's non-resource URL
//! (SubjectAccessReview), as kube-rbac-proxy and controller-runtime's metrics endpoint do. The
//! kubelet's probes stay open. Decisions are remembered briefly by the token's SHA-256 (never
//! the token), so a scraper costs the API server two requests a minute, not two a scrape.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

/// The non-resource URL an identity must be allowed to `get` to read `/metrics`.
pub const METRICS_URL: &str = "/metrics";
/// The non-resource URL an identity must be allowed to `get` to read any page of the view.
pub const VIEW_URL: &str = "/meridian/view";

/// How long an allowed decision is kept; a revoked right stops working within this.
const ALLOWED_FOR: Duration = Duration::from_secs(60);
/// How long a refusal is kept: short, so a right just granted works soon.
const REFUSED_FOR: Duration = Duration::from_secs(5);
/// Decisions kept at most; past it the oldest half goes (a flood of made-up tokens cannot grow
/// the map).
const MAX_KEPT: usize = 4096;

/// The answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// No token, or one the API server does not know: 401.
    Unauthenticated,
    /// A known identity without the right: 403.
    Forbidden,
    /// The API server could not be asked: 503, and nothing remembered.
    Unavailable,
}

/// Decisions by the token's SHA-256 and the URL: what, and until when.
type Decisions = HashMap<([u8; 32], &'static str), (Decision, Instant)>;

/// Asks the API server, and remembers its answers for a while.
pub struct Authorizer {
    client: kube::Client,
    decisions: Mutex<Decisions>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    pub fn new(client: kube::Client) -> Self {
        Authorizer {
            client,
            decisions: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the bearer of `token` may `get` `url`.
    pub async fn check(&self, token: Option<&str>, url: &'static str) -> Decision {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Decision::Unauthenticated;
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some((decision, until)) = self.lock().get(&(key, url))
            && now < *until
        {
            return *decision;
        }
        let decision = self.ask(token, url).await;
        let kept_for = match decision {
            Decision::Allowed => ALLOWED_FOR,
            Decision::Unauthenticated | Decision::Forbidden => REFUSED_FOR,
            Decision::Unavailable => return decision,
        };
        let mut decisions = self.lock();
        if decisions.len() >= MAX_KEPT {
            decisions.retain(|_, (_, until)| now < *until);
            if decisions.len() >= MAX_KEPT {
                decisions.clear();
            }
        }
        decisions.insert((key, url), (decision, now + kept_for));
        decision
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Decisions> {
        self.decisions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn ask(&self, token: &str, url: &'static str) -> Decision {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = match Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
        {
            Ok(reviewed) => reviewed,
            Err(error) => {
                tracing::warn!(%error, "a TokenReview failed; the page is refused meanwhile");
                return Decision::Unavailable;
            }
        };
        let status = reviewed.status.unwrap_or_default();
        let Some(user) = status.user.filter(|_| status.authenticated == Some(true)) else {
            return Decision::Unauthenticated;
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(url.to_string()),
                    verb: Some("get".to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        match Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
        {
            Ok(reviewed) if reviewed.status.as_ref().is_some_and(|s| s.allowed) => {
                Decision::Allowed
            }
            Ok(_) => Decision::Forbidden,
            Err(error) => {
                tracing::warn!(%error, "a SubjectAccessReview failed; the page is refused meanwhile");
                Decision::Unavailable
            }
        }
    }
}
