//! Which docker config entries apply to an image, by the kubelet's rules
//! (`pkg/credentialprovider/keyring.go`: `BasicDockerKeyring.Add` and `Lookup`,
//! `URLsMatch`, `isDefaultRegistryMatch`). Pure.
//!
//! - An entry's location (`https://reg.example:5000/v2/team`, `reg.example`, `*.azurecr.io`)
//!   becomes a key: scheme dropped, a leading `/v1/` or `/v2/` of the path dropped, then host
//!   plus the path unless it is empty or `/`.
//! - A key applies to an image repository (`docker.io/library/nginx`,
//!   `reg.example:5000/team/app`: registry and path, no tag) when the port is the same, the
//!   hosts have as many dot-separated parts and each part matches as a glob (`*.azurecr.io`,
//!   `k8s.*.io`; one glob matches one part), and the key's path is a prefix of the image's
//!   (as strings: `/team` also covers `/teamx`, as in the kubelet).
//! - Matching keys are tried from the greatest in reverse string order, so `reg/team`
//!   comes before `reg`.
//! - When no key applies and the image is on Docker Hub, the entry of `index.docker.io`
//!   (`https://index.docker.io/v1/`, what `docker login` writes) applies.

/// The keyring key of a docker config location.
pub fn key_of(location: &str) -> String {
    let rest = location
        .strip_prefix("https://")
        .or_else(|| location.strip_prefix("http://"))
        .unwrap_or(location);
    let (host, path) = split_host_path(rest);
    let path = if path.starts_with("/v2/") || path.starts_with("/v1/") {
        &path[3..]
    } else {
        path
    };
    if path.is_empty() || path == "/" {
        host.to_owned()
    } else {
        format!("{host}{path}")
    }
}

/// `host[:port]` and the path (from the first `/`, query and fragment dropped).
fn split_host_path(url: &str) -> (&str, &str) {
    let url = url.split(['?', '#']).next().unwrap_or(url);
    match url.find('/') {
        Some(i) => (&url[..i], &url[i..]),
        None => (url, ""),
    }
}

/// The host's dot-separated parts and the port (`""` without one).
fn split_port(host: &str) -> (Vec<&str>, &str) {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        match rest.split_once("]:") {
            Some((v6, port)) => (v6, port),
            None => (host, ""),
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if !name.contains(':') => (name, port),
            _ => (host, ""),
        }
    };
    (name.split('.').collect(), port)
}

/// Whether keyring key `key` applies to image repository `repository`.
pub fn key_matches(key: &str, repository: &str) -> bool {
    let (key_host, key_path) = split_host_path(key);
    let (image_host, image_path) = split_host_path(repository);
    let (key_parts, key_port) = split_port(key_host);
    let (image_parts, image_port) = split_port(image_host);
    key_port == image_port
        && key_parts.len() == image_parts.len()
        && image_path.starts_with(key_path)
        && key_parts
            .iter()
            .zip(&image_parts)
            .all(|(glob, part)| glob_match(glob.as_bytes(), part.as_bytes()))
}

/// Whether an image repository is on Docker Hub by its name (`isDefaultRegistryMatch`).
pub fn is_docker_hub(repository: &str) -> bool {
    let mut parts = repository.splitn(2, '/');
    let first = parts.next().unwrap_or_default();
    if first.is_empty() {
        return false;
    }
    if parts.next().is_none() {
        return true;
    }
    first == "docker.io" || first == "index.docker.io" || !first.contains(['.', ':'])
}

/// The key of the Docker Hub entry `docker login` writes.
pub const DOCKER_HUB_KEY: &str = "index.docker.io";

/// The indices of `keys` that apply to `repository`, in the kubelet's order.
pub fn lookup(keys: &[String], repository: &str) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|a, b| keys[*b].cmp(&keys[*a]).then(a.cmp(b)));
    let matched: Vec<usize> = order
        .iter()
        .copied()
        .filter(|i| key_matches(&keys[*i], repository))
        .collect();
    if !matched.is_empty() || !is_docker_hub(repository) {
        return matched;
    }
    order
        .into_iter()
        .filter(|i| keys[*i] == DOCKER_HUB_KEY)
        .collect()
}

/// One element of a host-part glob.
#[derive(Debug, PartialEq)]
enum Token {
    /// `*`: any run of characters.
    Star,
    /// `?`: one character.
    Any,
    /// `[...]`: one character in (or, negated, not in) the inclusive ranges.
    Class {
        negated: bool,
        ranges: Vec<(u8, u8)>,
    },
    Literal(u8),
}

impl Token {
    fn matches(&self, c: u8) -> bool {
        match self {
            Token::Star | Token::Any => true,
            Token::Class { negated, ranges } => {
                ranges.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != *negated
            }
            Token::Literal(l) => *l == c,
        }
    }
}

/// The tokens of a glob as Go's `filepath.Match` reads it: `*`, `?`, `[...]` (`^` negates,
/// `a-z` ranges, `\` escapes), `\` escapes; `None` when it is malformed.
fn tokens(pattern: &[u8]) -> Option<Vec<Token>> {
    let mut out = Vec::new();
    let mut rest = pattern;
    while let Some((&c, r)) = rest.split_first() {
        rest = r;
        out.push(match c {
            b'*' => Token::Star,
            b'?' => Token::Any,
            b'\\' => {
                let (&e, r) = rest.split_first()?;
                rest = r;
                Token::Literal(e)
            }
            b'[' => {
                let negated = rest.first() == Some(&b'^');
                if negated {
                    rest = &rest[1..];
                }
                let mut ranges = Vec::new();
                loop {
                    let (&lo, r) = rest.split_first()?;
                    rest = r;
                    if lo == b']' && !ranges.is_empty() {
                        break;
                    }
                    let lo = class_char(lo, &mut rest)?;
                    let hi = if rest.first() == Some(&b'-') {
                        rest = &rest[1..];
                        let (&h, r) = rest.split_first()?;
                        rest = r;
                        class_char(h, &mut rest)?
                    } else {
                        lo
                    };
                    ranges.push((lo, hi));
                }
                Token::Class { negated, ranges }
            }
            c => Token::Literal(c),
        });
    }
    Some(out)
}

/// A character of a class: `\x` is `x`; a bare `-` or `]` is malformed.
fn class_char(c: u8, rest: &mut &[u8]) -> Option<u8> {
    match c {
        b'\\' => {
            let (&e, r) = rest.split_first()?;
            *rest = r;
            Some(e)
        }
        b'-' | b']' => None,
        c => Some(c),
    }
}

/// Whether `text` (one host part) matches `pattern` as a glob; a malformed pattern
/// matches nothing. Linear backtracking over the last `*` only, so no pattern is slow.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let Some(toks) = tokens(pattern) else {
        return false;
    };
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match toks.get(p) {
            Some(Token::Star) => {
                star = Some((p, t));
                p += 1;
            }
            Some(tok) if tok.matches(text[t]) => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    toks[p.min(toks.len())..].iter().all(|t| *t == Token::Star)
}

#[cfg(test)]
mod tests;
