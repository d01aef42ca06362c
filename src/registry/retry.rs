//! A [`Registry`] that retries another one: transient failures (connection refused or reset,
//! timeouts, HTTP 5xx, 408, 429) are retried with exponential backoff and jitter (`backon`);
//! anything else fails at once. A blob upload is retried as a whole, so a broken upload session
//! restarts from its `POST`.

use std::time::Duration;

use async_trait::async_trait;
use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;

use super::{ErrorKind, Registry, RegistryError};
use crate::reference::RepositoryName;

/// Retry policy.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub retries: usize,
    /// First delay; it doubles up to `max_delay`.
    pub min_delay: Duration,
    /// Longest delay.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 5 retries, 500 ms doubling to 10 s (about 15 s in all).
    fn default() -> Self {
        RetryPolicy {
            retries: 5,
            min_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(10),
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
}

fn transient(e: &RegistryError) -> bool {
    e.kind == ErrorKind::Transient
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
        (|| self.inner.blob_exists(repo, digest))
            .retry(self.backoff())
            .when(transient)
            .notify(note)
            .await
    }

    async fn push_blob(
        &self,
        repo: &RepositoryName,
        digest: &str,
        data: Bytes,
    ) -> Result<(), RegistryError> {
        (|| self.inner.push_blob(repo, digest, data.clone()))
            .retry(self.backoff())
            .when(transient)
            .notify(note)
            .await
    }

    async fn mount_blob(&self, repo: &RepositoryName, from: &RepositoryName, digest: &str) -> bool {
        // A mount is an optimisation: one attempt, and any failure means "upload normally".
        self.inner.mount_blob(repo, from, digest).await
    }

    async fn pull_blob(&self, repo: &RepositoryName, digest: &str) -> Result<Bytes, RegistryError> {
        (|| self.inner.pull_blob(repo, digest))
            .retry(self.backoff())
            .when(transient)
            .notify(note)
            .await
    }

    async fn push_manifest(
        &self,
        repo: &RepositoryName,
        reference: &str,
        media_type: &str,
        body: Bytes,
    ) -> Result<(), RegistryError> {
        (|| {
            self.inner
                .push_manifest(repo, reference, media_type, body.clone())
        })
        .retry(self.backoff())
        .when(transient)
        .notify(note)
        .await
    }

    async fn pull_manifest(
        &self,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<Bytes, RegistryError> {
        (|| self.inner.pull_manifest(repo, reference))
            .retry(self.backoff())
            .when(transient)
            .notify(note)
            .await
    }

    async fn manifest_digest(
        &self,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<Option<String>, RegistryError> {
        (|| self.inner.manifest_digest(repo, reference))
            .retry(self.backoff())
            .when(transient)
            .notify(note)
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
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            retries: 3,
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
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
