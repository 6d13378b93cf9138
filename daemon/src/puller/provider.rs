//! Kubelet image credential providers, the pure parts: the `CredentialProviderConfig`
//! (`kubelet.config.k8s.io/v1`) and its validation, which providers an image is for
//! (`matchImages`), the plugin's request and response (`credentialprovider.kubelet.k8s.io/v1`),
//! the response cache, and the credentials a response gives an image. The exec is in
//! [`super::provider_exec`].
//!
//! Semantics follow the kubelet (`pkg/credentialprovider/plugin`):
//! - `matchImages` entries are globs over the image repository: same number of
//!   dot-separated host parts, each matching as a glob, same port, the entry's path a
//!   prefix of the image's ([`super::keyring::key_matches`]).
//! - The plugin is sent the image repository (`reg.example:5000/team/app`, no tag), as the
//!   kubelet sends the repository it pulls.
//! - A response is cached by its `cacheKeyType`: `Image` (this repository), `Registry` (the
//!   image's first path part), `Global` (every image of this provider); for its
//!   `cacheDuration`, or the provider's `defaultCacheDuration` when it has none; a
//!   duration of 0 is not cached.
//! - The `auth` locations are matched against the image by the keyring rules, as pull
//!   secret entries are; providers earlier in the config win on the same location.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use k8s_cri::v1::AuthConfig;
use serde::Deserialize;

use super::keyring;

/// The plugin API versions a provider may name (the same schema in all three).
pub const PLUGIN_API_VERSIONS: [&str; 3] = [
    "credentialprovider.kubelet.k8s.io/v1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
];

/// The config API versions accepted (the same schema in all three).
pub const CONFIG_API_VERSIONS: [&str; 3] = [
    "kubelet.config.k8s.io/v1",
    "kubelet.config.k8s.io/v1beta1",
    "kubelet.config.k8s.io/v1alpha1",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("credential provider config is not valid YAML or JSON: {0}")]
    Syntax(String),
    #[error("credential provider config: {0}")]
    Invalid(String),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("credential provider {provider}: {reason}")]
pub struct ResponseError {
    pub provider: String,
    pub reason: String,
}

/// One validated provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    pub name: String,
    pub match_images: Vec<String>,
    pub default_cache_duration: Duration,
    pub api_version: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConfig {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    providers: Vec<RawProvider>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawProvider {
    #[serde(default)]
    name: String,
    #[serde(default)]
    match_images: Vec<String>,
    default_cache_duration: Option<String>,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<RawEnv>,
}

#[derive(Debug, Deserialize)]
struct RawEnv {
    #[serde(default)]
    name: String,
    #[serde(default)]
    value: String,
}

/// Parses and validates a `CredentialProviderConfig` (YAML or JSON), as the kubelet
/// validates it: at least one provider; each with a unique name that is a file name, at
/// least one valid `matchImages` entry, a `defaultCacheDuration` that is not negative, a
/// known `apiVersion`; env entries with names.
pub fn parse_config(text: &str) -> Result<Vec<Provider>, ConfigError> {
    let raw: RawConfig =
        serde_saphyr::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
    let invalid = |m: String| Err(ConfigError::Invalid(m));
    if !CONFIG_API_VERSIONS.contains(&raw.api_version.as_str()) {
        return invalid(format!(
            "apiVersion {:?} is not one of {}",
            raw.api_version,
            CONFIG_API_VERSIONS.join(", ")
        ));
    }
    if raw.kind != "CredentialProviderConfig" {
        return invalid(format!(
            "kind {:?} is not CredentialProviderConfig",
            raw.kind
        ));
    }
    if raw.providers.is_empty() {
        return invalid("at least 1 item in providers is required".into());
    }
    let mut out: Vec<Provider> = Vec::new();
    for p in raw.providers {
        let name = p.name;
        if name.is_empty() {
            return invalid("a provider has no name".into());
        }
        if name == "." || name == ".." || name.contains(['/', '\\', ' ']) {
            return invalid(format!(
                "provider name {name:?} is not a file name (no '/', '\\', ' ', '.', '..')"
            ));
        }
        if out.iter().any(|o| o.name == name) {
            return invalid(format!("provider name {name:?} appears more than once"));
        }
        if p.match_images.is_empty() {
            return invalid(format!(
                "provider {name}: at least 1 item in matchImages is required"
            ));
        }
        for m in &p.match_images {
            check_match_image(m).map_err(|e| {
                ConfigError::Invalid(format!("provider {name}: matchImages {m:?}: {e}"))
            })?;
        }
        let Some(dcd) = p.default_cache_duration else {
            return invalid(format!("provider {name}: defaultCacheDuration is required"));
        };
        let default_cache_duration = parse_duration(&dcd).map_err(|e| {
            ConfigError::Invalid(format!(
                "provider {name}: defaultCacheDuration {dcd:?}: {e}"
            ))
        })?;
        if !PLUGIN_API_VERSIONS.contains(&p.api_version.as_str()) {
            return invalid(format!(
                "provider {name}: apiVersion {:?} is not one of {}",
                p.api_version,
                PLUGIN_API_VERSIONS.join(", ")
            ));
        }
        if let Some(e) = p.env.iter().find(|e| e.name.is_empty()) {
            return invalid(format!(
                "provider {name}: an env entry (value {:?}) has no name",
                e.value
            ));
        }
        out.push(Provider {
            name,
            match_images: p.match_images,
            default_cache_duration,
            api_version: p.api_version,
            args: p.args,
            env: p.env.into_iter().map(|e| (e.name, e.value)).collect(),
        });
    }
    Ok(out)
}

fn strip_scheme(s: &str) -> &str {
    s.strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
        .unwrap_or(s)
}

/// A `matchImages` entry: a host (globs allowed) with an optional numeric port and path.
fn check_match_image(m: &str) -> Result<(), String> {
    let rest = strip_scheme(m);
    if rest.contains("://") {
        return Err("only http and https schemes may be given".into());
    }
    if rest.chars().any(char::is_whitespace) {
        return Err("contains white space".into());
    }
    let host = rest.split('/').next().unwrap_or(rest);
    let name = match host.rsplit_once(':') {
        Some((name, port)) => {
            if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("port {port:?} is not a number"));
            }
            name
        }
        None => host,
    };
    if name.is_empty() || name.split('.').any(str::is_empty) {
        return Err("the host has an empty part".into());
    }
    if name.matches('[').count() != name.matches(']').count() {
        return Err("a glob bracket is not closed".into());
    }
    Ok(())
}

/// Parses a Go duration (`metav1.Duration`: `12h`, `1h30m`, `500ms`, `0s`, `0`); negative
/// durations are refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err("negative".into());
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty".into());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("{s:?} is not a duration (like 12h, 1m30s, 500ms)"))?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let secs = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("{s:?}: a number without a unit")),
            u => return Err(format!("{s:?}: unknown unit {u:?}")),
        };
        total += value * secs;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).map_err(|e| format!("{s:?}: {e}"))
}

/// Whether the provider is for the image repository `repository` (registry and path).
pub fn matches_image(provider: &Provider, repository: &str) -> bool {
    provider
        .match_images
        .iter()
        .any(|m| keyring::key_matches(strip_scheme(m), repository))
}

/// The `CredentialProviderRequest` sent to the plugin on stdin.
pub fn request_json(provider: &Provider, repository: &str) -> String {
    serde_json::json!({
        "apiVersion": provider.api_version,
        "kind": "CredentialProviderRequest",
        "image": repository,
    })
    .to_string()
}

/// Which images a cached response is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheKeyType {
    Image,
    Registry,
    Global,
}

/// The cache key of `repository` under `kind`: the repository, its first path part, or
/// the empty key.
pub fn cache_key(kind: CacheKeyType, repository: &str) -> String {
    match kind {
        CacheKeyType::Image => repository.to_owned(),
        CacheKeyType::Registry => repository.split('/').next().unwrap_or("").to_owned(),
        CacheKeyType::Global => String::new(),
    }
}

/// Credentials of one registry location.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Credential {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub password: String,
}

/// A validated `CredentialProviderResponse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub cache_key_type: CacheKeyType,
    /// `None`: the provider's default applies.
    pub cache_duration: Option<Duration>,
    /// Location (as a docker config key) → credentials.
    pub auth: BTreeMap<String, Credential>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawResponse {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    cache_key_type: String,
    cache_duration: Option<String>,
    #[serde(default)]
    auth: BTreeMap<String, Credential>,
}

/// Parses the plugin's stdout: a `CredentialProviderResponse` of the provider's apiVersion,
/// with a known `cacheKeyType` and a valid `cacheDuration`.
pub fn parse_response(provider: &Provider, stdout: &[u8]) -> Result<Response, ResponseError> {
    let fail = |reason: String| ResponseError {
        provider: provider.name.clone(),
        reason,
    };
    let raw: RawResponse = serde_json::from_slice(stdout).map_err(|e| {
        let shown = String::from_utf8_lossy(&stdout[..stdout.len().min(200)]).into_owned();
        fail(format!(
            "the plugin's output is no CredentialProviderResponse JSON ({e}): {shown:?}"
        ))
    })?;
    if raw.kind != "CredentialProviderResponse" {
        return Err(fail(format!(
            "response kind {:?} is not CredentialProviderResponse",
            raw.kind
        )));
    }
    if raw.api_version != provider.api_version {
        return Err(fail(format!(
            "response apiVersion {:?} is not the request's {:?}",
            raw.api_version, provider.api_version
        )));
    }
    let cache_key_type = match raw.cache_key_type.as_str() {
        "Image" => CacheKeyType::Image,
        "Registry" => CacheKeyType::Registry,
        "Global" => CacheKeyType::Global,
        other => {
            return Err(fail(format!(
                "cacheKeyType {other:?} is not Image, Registry or Global"
            )));
        }
    };
    let cache_duration = raw
        .cache_duration
        .map(|d| parse_duration(&d).map_err(|e| fail(format!("cacheDuration {d:?}: {e}"))))
        .transpose()?;
    Ok(Response {
        cache_key_type,
        cache_duration,
        auth: raw.auth,
    })
}

/// How long a response is cached: its own duration, else the provider's default; `None`
/// for zero (not cached).
pub fn cache_ttl(provider: &Provider, response: &Response) -> Option<Duration> {
    Some(
        response
            .cache_duration
            .unwrap_or(provider.default_cache_duration),
    )
    .filter(|d| !d.is_zero())
}

/// Longer than any daemon runs: the expiry of a cache duration an `Instant` cannot reach.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A cached `auth` map and when it expires.
type CacheEntry = (Instant, BTreeMap<String, Credential>);

/// Cached responses of all providers (by provider, key type and key), expiring lazily.
#[derive(Debug, Default)]
pub struct Cache {
    entries: HashMap<(String, CacheKeyType, String), CacheEntry>,
}

impl Cache {
    /// The cached `auth` of `provider` for `repository` at `now`: by image, then registry,
    /// then global key, as the kubelet looks them up. Expired entries are dropped.
    pub fn get(
        &mut self,
        provider: &str,
        repository: &str,
        now: Instant,
    ) -> Option<BTreeMap<String, Credential>> {
        self.entries.retain(|_, (expires, _)| *expires > now);
        [
            CacheKeyType::Image,
            CacheKeyType::Registry,
            CacheKeyType::Global,
        ]
        .into_iter()
        .find_map(|k| {
            self.entries
                .get(&(provider.to_owned(), k, cache_key(k, repository)))
                .map(|(_, auth)| auth.clone())
        })
    }

    /// Caches `response` of `provider` for `repository`, unless its TTL is zero.
    pub fn put(
        &mut self,
        provider: &Provider,
        repository: &str,
        response: &Response,
        now: Instant,
    ) {
        if let Some(ttl) = cache_ttl(provider, response) {
            let k = response.cache_key_type;
            // a duration past what an Instant can hold is "for as long as the daemon runs"
            let expires = now
                .checked_add(ttl)
                .or_else(|| now.checked_add(FOREVER))
                .unwrap_or(now);
            self.entries.insert(
                (provider.name.clone(), k, cache_key(k, repository)),
                (expires, response.auth.clone()),
            );
        }
    }
}

/// The CRI credentials that apply to `repository` from the providers' `auth` maps (in
/// config order: the first provider's entry wins on the same location), most specific
/// first by the keyring rules. `server_address` is left empty, as the kubelet leaves it:
/// containerd then offers them to whichever host it contacts for the image (it compares a
/// non-empty one with the host of a parsed URL, and a bare `host:port` is no such URL).
pub fn credentials_for(
    auths: &[BTreeMap<String, Credential>],
    repository: &str,
) -> Vec<AuthConfig> {
    let mut merged: BTreeMap<&str, &Credential> = BTreeMap::new();
    for a in auths {
        for (loc, c) in a {
            merged.entry(loc.as_str()).or_insert(c);
        }
    }
    let entries: Vec<(&str, &Credential)> = merged.into_iter().collect();
    let keys: Vec<String> = entries.iter().map(|(k, _)| keyring::key_of(k)).collect();
    keyring::lookup(&keys, repository)
        .into_iter()
        .filter_map(|i| entries.get(i))
        .map(|(_, c)| AuthConfig {
            username: c.username.clone(),
            password: c.password.clone(),
            ..Default::default()
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const OK: &str = r#"
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: ecr-credential-provider
    matchImages: ["*.dkr.ecr.*.amazonaws.com", "reg.example:5000/team"]
    defaultCacheDuration: "12h"
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    args: [get-credentials]
    env:
      - name: AWS_PROFILE
        value: nodes
"#;

    fn provider(match_images: &[&str], default: Duration) -> Provider {
        Provider {
            name: "p".into(),
            match_images: match_images.iter().map(|s| s.to_string()).collect(),
            default_cache_duration: default,
            api_version: PLUGIN_API_VERSIONS[0].into(),
            args: vec![],
            env: vec![],
        }
    }

    #[test]
    fn parses_yaml_and_json() {
        let p = parse_config(OK).unwrap();
        assert_eq!(
            p,
            vec![Provider {
                name: "ecr-credential-provider".into(),
                match_images: vec![
                    "*.dkr.ecr.*.amazonaws.com".into(),
                    "reg.example:5000/team".into()
                ],
                default_cache_duration: Duration::from_secs(12 * 3600),
                api_version: "credentialprovider.kubelet.k8s.io/v1".into(),
                args: vec!["get-credentials".into()],
                env: vec![("AWS_PROFILE".into(), "nodes".into())],
            }]
        );
        let json = r#"{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig",
            "providers":[{"name":"a","matchImages":["*"],"defaultCacheDuration":"0s",
            "apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1"}]}"#;
        let p = parse_config(json).unwrap();
        assert_eq!(p[0].default_cache_duration, Duration::ZERO);
        assert!(p[0].args.is_empty() && p[0].env.is_empty());
    }

    #[test]
    fn invalid_configs_say_why() {
        let base = |provider: &str| {
            format!(
                "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n{provider}"
            )
        };
        let p = |fields: &str| base(&format!("  - {fields}\n"));
        let good = "matchImages: ['*'], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1";
        for (text, want) in [
            ("providers: [".to_string(), "not valid YAML"),
            (
                OK.replace("kubelet.config.k8s.io/v1\n", "v1\n"),
                "apiVersion \"v1\" is not one of",
            ),
            (
                OK.replace("kind: CredentialProviderConfig", "kind: Other"),
                "kind \"Other\"",
            ),
            (
                base("  []\n").replace("providers:\n  []", "providers: []"),
                "at least 1 item in providers",
            ),
            (p(&format!("{{name: '', {good}}}")), "has no name"),
            (p(&format!("{{name: a/b, {good}}}")), "is not a file name"),
            (p(&format!("{{name: '..', {good}}}")), "is not a file name"),
            (
                base(&format!(
                    "  - {{name: a, {good}}}\n  - {{name: a, {good}}}\n"
                )),
                "appears more than once",
            ),
            (
                p(
                    "{name: a, matchImages: [], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}",
                ),
                "at least 1 item in matchImages",
            ),
            (
                p(
                    "{name: a, matchImages: ['reg:port'], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}",
                ),
                "port \"port\" is not a number",
            ),
            (
                p(
                    "{name: a, matchImages: ['a..b'], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}",
                ),
                "empty part",
            ),
            (
                p(
                    "{name: a, matchImages: ['ftp://a'], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}",
                ),
                "schemes",
            ),
            (
                p(
                    "{name: a, matchImages: ['*'], apiVersion: credentialprovider.kubelet.k8s.io/v1}",
                ),
                "defaultCacheDuration is required",
            ),
            (
                p(
                    "{name: a, matchImages: ['*'], defaultCacheDuration: -1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}",
                ),
                "negative",
            ),
            (
                p(
                    "{name: a, matchImages: ['*'], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v2}",
                ),
                "apiVersion \"credentialprovider.kubelet.k8s.io/v2\"",
            ),
            (
                p(&format!("{{name: a, {good}, env: [{{value: x}}]}}")),
                "has no name",
            ),
        ] {
            let e = parse_config(&text).expect_err(&text).to_string();
            assert!(e.contains(want), "{text}\n=> {e}\n(want {want:?})");
        }
    }

    #[test]
    fn go_durations() {
        for (s, want) in [
            ("0", Some(Duration::ZERO)),
            ("0s", Some(Duration::ZERO)),
            ("12h", Some(Duration::from_secs(43200))),
            ("1h30m", Some(Duration::from_secs(5400))),
            ("1m0.5s", Some(Duration::from_millis(60500))),
            ("500ms", Some(Duration::from_millis(500))),
            ("+2s", Some(Duration::from_secs(2))),
            ("-1s", None),
            ("", None),
            ("12", None),
            ("1d", None),
            ("h", None),
        ] {
            assert_eq!(parse_duration(s).ok(), want, "{s:?}");
        }
    }

    #[test]
    fn match_images_follow_the_kubelet_globs() {
        for (globs, repo, want) in [
            (
                &["*.dkr.ecr.*.amazonaws.com"][..],
                "123.dkr.ecr.eu-west-1.amazonaws.com/app",
                true,
            ),
            (
                &["*.dkr.ecr.*.amazonaws.com"],
                "dkr.ecr.eu-west-1.amazonaws.com/app",
                false,
            ),
            (&["*.azurecr.io"], "team.azurecr.io/x", true),
            (&["*.azurecr.io"], "a.team.azurecr.io/x", false),
            (&["*"], "docker.io/library/nginx", false),
            (&["*.*"], "docker.io/library/nginx", true),
            (&["*"], "localhost/a", true),
            (&["reg.example:5000"], "reg.example:5000/a", true),
            (&["reg.example:5000"], "reg.example/a", false),
            (&["reg.example"], "reg.example:5000/a", false),
            (&["*.*.*.*:5000"], "127.0.0.1:5000/a", true),
            (&["*.*.*.*"], "127.0.0.1:5000/a", false),
            (&["127.0.0.1:5000/team"], "127.0.0.1:5000/team/app", true),
            (&["127.0.0.1:5000/team"], "127.0.0.1:5000/other/app", false),
            (&["https://gcr.io"], "gcr.io/p/i", true),
            (&["quay.io", "gcr.io"], "gcr.io/p/i", true),
            (&["k8s.*.io"], "k8s.gcr.io/p", true),
        ] {
            assert_eq!(
                matches_image(&provider(globs, Duration::ZERO), repo),
                want,
                "{globs:?} {repo}"
            );
        }
    }

    #[test]
    fn request_is_the_kubelets() {
        let v: serde_json::Value =
            serde_json::from_str(&request_json(&provider(&["*"], Duration::ZERO), "r/a")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"apiVersion": "credentialprovider.kubelet.k8s.io/v1",
                "kind": "CredentialProviderRequest", "image": "r/a"})
        );
    }

    #[test]
    fn responses_are_validated() {
        let p = provider(&["*"], Duration::from_secs(60));
        let ok = br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse",
            "cacheKeyType":"Registry","cacheDuration":"5m","auth":{"reg:5000":{"username":"u","password":"p"}}}"#;
        let r = parse_response(&p, ok).unwrap();
        assert_eq!(r.cache_key_type, CacheKeyType::Registry);
        assert_eq!(r.cache_duration, Some(Duration::from_secs(300)));
        assert_eq!(
            r.auth.get("reg:5000"),
            Some(&Credential {
                username: "u".into(),
                password: "p".into()
            })
        );
        let no_dur = br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image"}"#;
        let r = parse_response(&p, no_dur).unwrap();
        assert_eq!((r.cache_duration, r.auth.len()), (None, 0));
        for (out, want) in [
            (&b""[..], "no CredentialProviderResponse JSON"),
            (b"\xff\xfe", "no CredentialProviderResponse JSON"),
            (b"Error: token expired", "no CredentialProviderResponse JSON"),
            (br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"Other","cacheKeyType":"Image"}"#, "kind \"Other\""),
            (br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","kind":"CredentialProviderResponse","cacheKeyType":"Image"}"#, "is not the request's"),
            (br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Node"}"#, "cacheKeyType \"Node\""),
            (br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"soon"}"#, "cacheDuration"),
            (br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","auth":{"r":{"username":5}}}"#, "no CredentialProviderResponse JSON"),
        ] {
            let e = parse_response(&p, out).expect_err(want).to_string();
            assert!(e.starts_with("credential provider p: ") && e.contains(want), "{e}");
        }
    }

    #[test]
    fn cache_by_key_type_and_duration() {
        let p = provider(&["*"], Duration::from_secs(60));
        let t0 = Instant::now();
        let auth = BTreeMap::from([("r".to_string(), Credential::default())]);
        let resp = |k, d| Response {
            cache_key_type: k,
            cache_duration: d,
            auth: auth.clone(),
        };
        // (response, image cached for, image asked, at, hit)
        for (r, cached_for, asked, after, hit) in [
            (
                resp(CacheKeyType::Image, None),
                "reg:5000/a",
                "reg:5000/a",
                59,
                true,
            ),
            (
                resp(CacheKeyType::Image, None),
                "reg:5000/a",
                "reg:5000/a",
                60,
                false,
            ),
            (
                resp(CacheKeyType::Image, None),
                "reg:5000/a",
                "reg:5000/b",
                1,
                false,
            ),
            (
                resp(CacheKeyType::Registry, None),
                "reg:5000/a",
                "reg:5000/b/c",
                1,
                true,
            ),
            (
                resp(CacheKeyType::Registry, None),
                "reg:5000/a",
                "reg:5001/a",
                1,
                false,
            ),
            (
                resp(CacheKeyType::Global, None),
                "reg:5000/a",
                "other/x",
                1,
                true,
            ),
            (
                resp(CacheKeyType::Global, Some(Duration::from_secs(600))),
                "r/a",
                "o/x",
                599,
                true,
            ),
            (
                resp(CacheKeyType::Global, Some(Duration::ZERO)),
                "r/a",
                "r/a",
                0,
                false,
            ),
        ] {
            let mut c = Cache::default();
            c.put(&p, cached_for, &r, t0);
            let got = c.get("p", asked, t0 + Duration::from_secs(after));
            assert_eq!(got.is_some(), hit, "{r:?} {cached_for} {asked} +{after}s");
            assert!(c.get("other-provider", cached_for, t0).is_none());
        }
        let mut c = Cache::default();
        let huge = parse_duration("5000000000000000h").unwrap();
        c.put(&p, "r/a", &resp(CacheKeyType::Image, Some(huge)), t0);
        assert!(
            c.get("p", "r/a", t0 + Duration::from_secs(3600)).is_some(),
            "a duration past Instant's range is cached, not a panic"
        );
        let mut c = Cache::default();
        c.put(
            &provider(&["*"], Duration::ZERO),
            "r/a",
            &resp(CacheKeyType::Image, None),
            t0,
        );
        assert!(
            c.get("p", "r/a", t0).is_none(),
            "a zero default is not cached"
        );
    }

    #[test]
    fn credentials_by_the_keyring_rules() {
        let c = |u: &str| Credential {
            username: u.into(),
            password: format!("{u}-pw"),
        };
        let first = BTreeMap::from([
            ("127.0.0.1:5000".to_string(), c("host")),
            ("https://127.0.0.1:5000/v2/team".to_string(), c("team")),
            ("other:5000".to_string(), c("other")),
        ]);
        let second = BTreeMap::from([
            ("127.0.0.1:5000".to_string(), c("later")),
            ("*.example".to_string(), c("glob")),
        ]);
        let users = |repo: &str| {
            credentials_for(&[first.clone(), second.clone()], repo)
                .into_iter()
                .map(|a| {
                    assert_eq!(a.server_address, "", "as the kubelet: no server_address");
                    assert_eq!(a.password, format!("{}-pw", a.username));
                    a.username
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(users("127.0.0.1:5000/team/app"), ["team", "host"]);
        assert_eq!(users("127.0.0.1:5000/app"), ["host"]);
        assert_eq!(users("reg.example/app"), ["glob"]);
        assert!(users("127.0.0.1:5001/app").is_empty());
    }
}
