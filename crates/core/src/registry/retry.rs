//! A [`Registry`] that retries another one: transient failures (connection refused or reset,
//! timeouts, HTTP 5xx, 408, 429; [`ErrorKind::Transient`] as the client classifies them) are
//! retried with exponential backoff and jitter (`backon`); anything else fails at once, among it
//! HTTP 507 (storage full: the same bytes meet the same full disk) and a 5xx whose body names a
//! storage the registry cannot write. A blob upload is retried as a whole, so a broken upload session
//! restarts from its `POST`. An operation is bounded in time as well as in tries: no retry starts
//! when, judging by the attempt that just failed, it would end after
//! [`RetryPolicy::operation_timeout`], so a registry that accepts connections and never answers
//! fails an operation within about that long rather than after every try (with the defaults, an
//! idle timeout of 30 s per request and a bound of 120 s, in about two minutes: an attempt of
//! oci-client there is two silent requests, its token probe of `/v2/` and the request itself).
//! The final error says how many attempts were made over how long.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;

use super::{ErrorKind, Registry, RegistryError};
use crate::base::reference::RepositoryName;

/// Retry policy.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub retries: usize,
    /// First delay; it doubles up to `max_delay`.
    pub min_delay: Duration,
    /// Longest delay.
    pub max_delay: Duration,
    /// No retry starts when the operation, counted from its first attempt, would then end after
    /// this long (each retry is assumed to last as long as the attempt that just failed).
    pub operation_timeout: Duration,
}

/// The default [`RetryPolicy::operation_timeout`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(120);

impl Default for RetryPolicy {
    /// 5 retries, 500 ms doubling to 10 s (about 15 s in all), at most
    /// [`DEFAULT_OPERATION_TIMEOUT`] per operation.
    fn default() -> Self {
        RetryPolicy {
            retries: 5,
            min_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(10),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        }
    }
}

/// Wraps a registry with retries.
pub struct Retrying<R> {
    inner: R,
    policy: RetryPolicy,
}

impl<R: Registry> Retrying<R> {
    /// `inner` with `policy`.
    pub fn new(inner: R, policy: RetryPolicy) -> Self {
        Retrying { inner, policy }
    }

    fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(self.policy.min_delay)
            .with_max_delay(self.policy.max_delay)
            .with_max_times(self.policy.retries)
            .with_jitter()
    }

    /// Runs `attempt` with retries of transient failures, within the policy's tries and time.
    async fn run<T, F, Fut>(&self, mut attempt: F) -> Result<T, RegistryError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, RegistryError>>,
    {
        let start = Instant::now();
        // (attempts made, start of the last one)
        let state = Mutex::new((0usize, start));
        // A `Retry-After` that would end past the bound, and when it was given.
        let beyond: Mutex<Option<(Duration, std::time::SystemTime)>> = Mutex::new(None);
        let bound = self.policy.operation_timeout;
        let result = (|| {
            {
                let mut s = state.lock().expect("retry state");
                s.0 += 1;
                s.1 = Instant::now();
            }
            attempt()
        })
        .retry(self.backoff())
        .when(|e| {
            let (_, last) = *state.lock().expect("retry state");
            transient(e) && start.elapsed() + last.elapsed() <= bound
        })
        // A registry that names its wait (429 with `Retry-After`) is not asked again before
        // then, nor at all when then is past the bound.
        .adjust(|e, next| {
            let ErrorKind::RateLimited(Some(wait)) = e.kind else {
                return next;
            };
            let next = next?;
            if start.elapsed() + wait > bound {
                *beyond.lock().expect("retry state") = Some((wait, std::time::SystemTime::now()));
                return None;
            }
            Some(next.max(wait))
        })
        .notify(note)
        .await;
        result.map_err(|mut e| {
            let (n, _) = *state.lock().expect("retry state");
            if n > 1 {
                e.message = format!(
                    "{} (gave up after {n} attempts in {:.0} s)",
                    e.message,
                    start.elapsed().as_secs_f64()
                );
            }
            if let Some((wait, at)) = *beyond.lock().expect("retry state") {
                let again = time::OffsetDateTime::from(at + wait);
                e.message = format!(
                    "{}; the registry takes requests again in {} s, at {}, after this operation's bound of {} s (--registry-operation-timeout)",
                    e.message,
                    wait.as_secs(),
                    crate::base::util::rfc3339(again.unix_timestamp()),
                    bound.as_secs()
                );
            }
            e
        })
    }
}

fn transient(e: &RegistryError) -> bool {
    e.kind.is_transient()
}

fn note(e: &RegistryError, after: Duration) {
    tracing::warn!("{e}; retrying in {:.1}s", after.as_secs_f64());
}

#[async_trait]
impl<R: Registry> Registry for Retrying<R> {
    async fn blob_exists(
        &self,
        repo: &RepositoryName,
        digest: &str,
    ) -> Result<bool, RegistryError> {
        self.run(|| self.inner.blob_exists(repo, digest)).await
    }

    async fn push_blob(
        &self,
        repo: &RepositoryName,
        digest: &str,
        data: Bytes,
    ) -> Result<(), RegistryError> {
        self.run(|| self.inner.push_blob(repo, digest, data.clone()))
            .await
    }

    async fn mount_blob(&self, repo: &RepositoryName, from: &RepositoryName, digest: &str) -> bool {
        // A mount is an optimisation: one attempt, and any failure means "upload normally".
        self.inner.mount_blob(repo, from, digest).await
    }

    async fn pull_blob(&self, repo: &RepositoryName, digest: &str) -> Result<Bytes, RegistryError> {
        self.run(|| self.inner.pull_blob(repo, digest)).await
    }

    async fn push_manifest(
        &self,
        repo: &RepositoryName,
        reference: &str,
        media_type: &str,
        body: Bytes,
    ) -> Result<(), RegistryError> {
        self.run(|| {
            self.inner
                .push_manifest(repo, reference, media_type, body.clone())
        })
        .await
    }

    async fn pull_manifest(
        &self,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<Bytes, RegistryError> {
        self.run(|| self.inner.pull_manifest(repo, reference)).await
    }

    async fn manifest_digest(
        &self,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<Option<String>, RegistryError> {
        self.run(|| self.inner.manifest_digest(repo, reference))
            .await
    }

    async fn check_push(&self, repo: &RepositoryName) -> Result<(), RegistryError> {
        self.run(|| self.inner.check_push(repo)).await
    }

    async fn referrers_page(
        &self,
        repo: &RepositoryName,
        subject: &str,
        next: Option<&str>,
    ) -> Result<super::referrers::ReferrersPage, RegistryError> {
        self.run(|| self.inner.referrers_page(repo, subject, next))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Fails `failures` times with `kind`, then answers.
    struct Flaky {
        failures: usize,
        kind: ErrorKind,
        calls: AtomicUsize,
    }

    /// A registry that never answers: every attempt times out after 40 ms.
    struct Silent {
        calls: AtomicUsize,
    }

    #[async_trait]
    impl Registry for Silent {
        async fn blob_exists(&self, _: &RepositoryName, _: &str) -> Result<bool, RegistryError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(40)).await;
            Err(err(ErrorKind::Transient))
        }
        async fn push_blob(
            &self,
            _: &RepositoryName,
            _: &str,
            _: Bytes,
        ) -> Result<(), RegistryError> {
            unimplemented!()
        }
        async fn pull_blob(&self, _: &RepositoryName, _: &str) -> Result<Bytes, RegistryError> {
            unimplemented!()
        }
        async fn push_manifest(
            &self,
            _: &RepositoryName,
            _: &str,
            _: &str,
            _: Bytes,
        ) -> Result<(), RegistryError> {
            unimplemented!()
        }
        async fn pull_manifest(&self, _: &RepositoryName, _: &str) -> Result<Bytes, RegistryError> {
            unimplemented!()
        }
        async fn manifest_digest(
            &self,
            _: &RepositoryName,
            _: &str,
        ) -> Result<Option<String>, RegistryError> {
            unimplemented!()
        }
        async fn check_push(&self, _: &RepositoryName) -> Result<(), RegistryError> {
            unimplemented!()
        }
    }

    // Virtual time: the bound is a rule, not a speed; a loaded machine must not change it.
    #[tokio::test(start_paused = true)]
    async fn an_operation_is_bounded_in_time() {
        let repo: RepositoryName = "r.example/a".parse().unwrap();
        let r = Retrying::new(
            Silent {
                calls: AtomicUsize::new(0),
            },
            RetryPolicy {
                retries: 10,
                min_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(2),
                operation_timeout: Duration::from_millis(100),
            },
        );
        let start = Instant::now();
        let e = r.blob_exists(&repo, "d").await.unwrap_err();
        // 40 ms + 40 ms ends by 100 ms; a third attempt would not.
        assert_eq!(r.inner.calls.load(Ordering::SeqCst), 2);
        assert!(start.elapsed() < Duration::from_millis(200));
        assert!(
            e.message.starts_with("boom (gave up after 2 attempts in "),
            "{}",
            e.message
        );
    }

    fn err(kind: ErrorKind) -> RegistryError {
        RegistryError {
            registry: "r".into(),
            operation: "op".into(),
            message: "boom".into(),
            kind,
        }
    }

    #[async_trait]
    impl Registry for Flaky {
        async fn blob_exists(&self, _: &RepositoryName, _: &str) -> Result<bool, RegistryError> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if n < self.failures {
                Err(err(self.kind))
            } else {
                Ok(true)
            }
        }
        async fn push_blob(
            &self,
            _: &RepositoryName,
            _: &str,
            _: Bytes,
        ) -> Result<(), RegistryError> {
            unimplemented!()
        }
        async fn pull_blob(&self, _: &RepositoryName, _: &str) -> Result<Bytes, RegistryError> {
            unimplemented!()
        }
        async fn push_manifest(
            &self,
            _: &RepositoryName,
            _: &str,
            _: &str,
            _: Bytes,
        ) -> Result<(), RegistryError> {
            unimplemented!()
        }
        async fn pull_manifest(&self, _: &RepositoryName, _: &str) -> Result<Bytes, RegistryError> {
            unimplemented!()
        }
        async fn manifest_digest(
            &self,
            _: &RepositoryName,
            _: &str,
        ) -> Result<Option<String>, RegistryError> {
            unimplemented!()
        }
        async fn check_push(&self, _: &RepositoryName) -> Result<(), RegistryError> {
            unimplemented!()
        }
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            retries: 3,
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            operation_timeout: Duration::from_secs(60),
        }
    }

    #[tokio::test]
    async fn transient_errors_are_retried_others_are_not() {
        let repo: RepositoryName = "r.example/a".parse().unwrap();
        let r = Retrying::new(
            Flaky {
                failures: 2,
                kind: ErrorKind::Transient,
                calls: AtomicUsize::new(0),
            },
            fast(),
        );
        assert!(r.blob_exists(&repo, "d").await.unwrap());
        assert_eq!(r.inner.calls.load(Ordering::SeqCst), 3);

        let r = Retrying::new(
            Flaky {
                failures: 9,
                kind: ErrorKind::Transient,
                calls: AtomicUsize::new(0),
            },
            fast(),
        );
        assert!(r.blob_exists(&repo, "d").await.is_err());
        assert_eq!(
            r.inner.calls.load(Ordering::SeqCst),
            4,
            "1 attempt + 3 retries"
        );

        let r = Retrying::new(
            Flaky {
                failures: 1,
                kind: ErrorKind::Auth,
                calls: AtomicUsize::new(0),
            },
            fast(),
        );
        assert_eq!(
            r.blob_exists(&repo, "d").await.unwrap_err().kind,
            ErrorKind::Auth
        );
        assert_eq!(r.inner.calls.load(Ordering::SeqCst), 1);
    }
}
