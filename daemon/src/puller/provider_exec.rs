//! Kubelet image credential providers, the I/O: loads the config and checks the plugin
//! binaries at start-up, execs a plugin with the request on stdin under a timeout, and
//! keeps the response cache ([`super::provider`] has the rules).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_cri::v1::AuthConfig;
use tokio::io::AsyncWriteExt;

use super::provider::{self, Cache, Provider, ResponseError};

/// How long a plugin may run, as the kubelet allows it.
pub const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read the credential provider config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Config {
        path: PathBuf,
        source: provider::ConfigError,
    },
    #[error(
        "credential provider {name}: plugin binary {path} is missing or not executable: {reason}"
    )]
    Binary {
        name: String,
        path: PathBuf,
        reason: String,
    },
}

/// The configured providers, their binaries and the response cache.
#[derive(Debug)]
pub struct CredentialProviders {
    providers: Vec<(Provider, PathBuf, tokio::sync::Mutex<()>)>,
    cache: std::sync::Mutex<Cache>,
    timeout: Duration,
}

impl CredentialProviders {
    /// Reads `config` (the kubelet's `--image-credential-provider-config`) and finds each
    /// provider's binary `<bin_dir>/<name>` (`--image-credential-provider-bin-dir`).
    pub fn load(config: &Path, bin_dir: &Path) -> Result<Self, LoadError> {
        let text = std::fs::read_to_string(config).map_err(|source| LoadError::Read {
            path: config.to_path_buf(),
            source,
        })?;
        let providers = provider::parse_config(&text).map_err(|source| LoadError::Config {
            path: config.to_path_buf(),
            source,
        })?;
        Self::new(providers, bin_dir, DEFAULT_EXEC_TIMEOUT)
    }

    /// Providers whose binaries are in `bin_dir`, each run for at most `timeout`.
    pub fn new(
        providers: Vec<Provider>,
        bin_dir: &Path,
        timeout: Duration,
    ) -> Result<Self, LoadError> {
        let providers = providers
            .into_iter()
            .map(|p| {
                let path = bin_dir.join(&p.name);
                check_executable(&path).map_err(|reason| LoadError::Binary {
                    name: p.name.clone(),
                    path: path.clone(),
                    reason,
                })?;
                Ok((p, path, tokio::sync::Mutex::new(())))
            })
            .collect::<Result<_, LoadError>>()?;
        Ok(Self {
            providers,
            cache: std::sync::Mutex::default(),
            timeout,
        })
    }

    /// The provider names, in config order.
    pub fn names(&self) -> Vec<&str> {
        self.providers
            .iter()
            .map(|(p, ..)| p.name.as_str())
            .collect()
    }

    /// Credentials for the image repository `repository` from every provider that is for it
    /// (cached responses reused, others executed), and the errors of those that failed.
    pub async fn credentials(&self, repository: &str) -> (Vec<AuthConfig>, Vec<String>) {
        let mut auths = Vec::new();
        let mut errors = Vec::new();
        for (p, path, running) in &self.providers {
            if !provider::matches_image(p, repository) {
                continue;
            }
            // one exec per provider at a time: a pull waiting here finds the response of
            // the one before it in the cache
            let _one = running.lock().await;
            if let Some(a) = self.cache_lock().get(&p.name, repository, Instant::now()) {
                tracing::debug!(provider = %p.name, image = %repository, "cached provider credentials");
                auths.push(a);
                continue;
            }
            match run_plugin(p, path, repository, self.timeout)
                .await
                .and_then(|out| provider::parse_response(p, &out))
            {
                Ok(r) => {
                    tracing::info!(provider = %p.name, image = %repository, locations = r.auth.len(), cache_key_type = ?r.cache_key_type, "credential provider answered");
                    self.cache_lock().put(p, repository, &r, Instant::now());
                    auths.push(r.auth);
                }
                Err(e) => {
                    tracing::warn!(error = %e, image = %repository, "credential provider failed");
                    errors.push(e.to_string());
                }
            }
        }
        (provider::credentials_for(&auths, repository), errors)
    }

    fn cache_lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn check_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a file".into());
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err("no execute permission".into());
    }
    Ok(())
}

/// Runs the plugin with the request on stdin; its stdout when it exits 0 within `timeout`.
async fn run_plugin(
    p: &Provider,
    path: &Path,
    repository: &str,
    timeout: Duration,
) -> Result<Vec<u8>, ResponseError> {
    let fail = |reason: String| ResponseError {
        provider: p.name.clone(),
        reason,
    };
    let mut child = tokio::process::Command::new(path)
        .args(&p.args)
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| fail(format!("cannot run {}: {e}", path.display())))?;
    let request = provider::request_json(p, repository);
    let run = async {
        if let Some(mut stdin) = child.stdin.take() {
            // a plugin that exits without reading its input is judged by its output
            let _ = stdin.write_all(request.as_bytes()).await;
            drop(stdin);
        }
        child.wait_with_output().await
    };
    let out = tokio::time::timeout(timeout, run)
        .await
        .map_err(|_| {
            fail(format!(
                "the plugin did not answer within {}s (killed)",
                timeout.as_secs_f64()
            ))
        })?
        .map_err(|e| fail(format!("waiting for the plugin: {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stderr: String = stderr.trim().chars().take(500).collect();
        return Err(fail(format!(
            "the plugin failed ({}): {stderr}",
            out.status
        )));
    }
    Ok(out.stdout)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str, body: &str) {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn provider(name: &str, globs: &[&str], default: Duration) -> Provider {
        Provider {
            name: name.into(),
            match_images: globs.iter().map(|s| s.to_string()).collect(),
            default_cache_duration: default,
            api_version: provider::PLUGIN_API_VERSIONS[0].into(),
            args: vec!["--arg1".into()],
            env: vec![("SECRET_USER".into(), "alice".into())],
        }
    }

    /// A plugin that logs each request (with its args) to `calls` and answers with the
    /// env-given user for the registry it was asked about.
    fn answering(dir: &Path, name: &str, cache_key_type: &str) {
        let calls = dir.join(format!("{name}.calls"));
        script(
            dir,
            name,
            &format!(
                r#"req=$(cat)
echo "$* $req" >> {calls}
reg=$(echo "$req" | sed 's/.*"image":"\([^/"]*\).*/\1/')
printf '{{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"{cache_key_type}","auth":{{"%s":{{"username":"%s","password":"pw"}}}}}}' "$reg" "$SECRET_USER""#,
                calls = calls.display()
            ),
        );
    }

    fn calls(dir: &Path, name: &str) -> Vec<String> {
        std::fs::read_to_string(dir.join(format!("{name}.calls")))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[tokio::test]
    async fn runs_the_plugin_and_caches_its_answer() {
        let dir = tempfile::tempdir().unwrap();
        answering(dir.path(), "reg", "Registry");
        let cp = CredentialProviders::new(
            vec![provider(
                "reg",
                &["127.0.0.1:5000"],
                Duration::from_secs(60),
            )],
            dir.path(),
            Duration::from_secs(10),
        )
        .unwrap();
        let (c, errors) = cp.credentials("127.0.0.1:5000/team/app").await;
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].username.as_str(), c[0].password.as_str()),
            ("alice", "pw")
        );
        assert_eq!(
            calls(dir.path(), "reg"),
            [
                r#"--arg1 {"apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"127.0.0.1:5000/team/app","kind":"CredentialProviderRequest"}"#
            ]
        );
        // the same registry: from the cache; an image no matchImages covers: no exec
        let (c, _) = cp.credentials("127.0.0.1:5000/other").await;
        assert_eq!(c.len(), 1);
        let (c, errors) = cp.credentials("127.0.0.1:5001/x").await;
        assert!(c.is_empty() && errors.is_empty());
        assert_eq!(calls(dir.path(), "reg").len(), 1);
    }

    #[tokio::test]
    async fn failures_are_reported_never_panicked_on() {
        let dir = tempfile::tempdir().unwrap();
        script(dir.path(), "fails", "echo 'no token for node' >&2; exit 3");
        script(
            dir.path(),
            "garbage",
            "cat >/dev/null; printf '\\377 not json'",
        );
        script(dir.path(), "slow", "exec sleep 30");
        answering(dir.path(), "good", "Image");
        let all = ["*.*.*.*:5000"];
        let cp = CredentialProviders::new(
            vec![
                provider("fails", &all, Duration::ZERO),
                provider("garbage", &all, Duration::ZERO),
                provider("slow", &all, Duration::ZERO),
                provider("good", &all, Duration::ZERO),
            ],
            dir.path(),
            Duration::from_millis(500),
        )
        .unwrap();
        let t0 = Instant::now();
        let (c, errors) = cp.credentials("127.0.0.1:5000/a").await;
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the slow plugin was killed"
        );
        assert_eq!(c.len(), 1, "the good provider still counts");
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors[0].starts_with(
                "credential provider fails: the plugin failed (exit status: 3): no token for node"
            ),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].contains("credential provider garbage: the plugin's output is no CredentialProviderResponse JSON"),
            "{}",
            errors[1]
        );
        assert!(
            errors[2].contains("credential provider slow: the plugin did not answer within 0.5s"),
            "{}",
            errors[2]
        );
        // not cached (default 0): executed again
        let _ = cp.credentials("127.0.0.1:5000/a").await;
        assert_eq!(calls(dir.path(), "good").len(), 2);
    }

    #[test]
    fn missing_binaries_and_configs_fail_at_load() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("noexec"), "#!/bin/sh\n").unwrap();
        for name in ["absent", "noexec"] {
            let e = CredentialProviders::new(
                vec![provider(name, &["*"], Duration::ZERO)],
                dir.path(),
                DEFAULT_EXEC_TIMEOUT,
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.starts_with(&format!("credential provider {name}: plugin binary")),
                "{e}"
            );
        }
        let cfg = dir.path().join("config.yaml");
        std::fs::write(
            &cfg,
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: []\n",
        )
        .unwrap();
        let e = CredentialProviders::load(&cfg, dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 1 item in providers"), "{e}");
        let e = CredentialProviders::load(&dir.path().join("nope.yaml"), dir.path())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("cannot read the credential provider config"),
            "{e}"
        );
    }
}
