//! Waiting for eventual consistency without timing assertions: poll until a condition holds,
//! with a generous deadline that only exists so a broken test ends instead of hanging.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::Error;

/// How long [`eventually`] waits by default; generous for a loaded two-core machine.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(120);

/// Polls `check` until it yields `Some`, at most for `patience`.
pub async fn eventually<T, F, Fut>(what: &str, patience: Duration, mut check: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, Error>>,
{
    let started = Instant::now();
    let mut interval = Duration::from_millis(100);
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        if started.elapsed() > patience {
            return Err(Error::NotReady {
                what: what.to_string(),
                seconds: patience.as_secs(),
                log_tail: String::new(),
            });
        }
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(Duration::from_secs(1));
    }
}
