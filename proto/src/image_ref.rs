//! Image references (`[registry/]path[:tag][@digest]`): the one place that reads them,
//! for the controller (ImagePullJob → NodeImage names, image comparisons) and the daemon
//! (reference checks before a pull, the registry of pull credentials).
//!
//! The name and tag are parsed and normalised by oci-spec's distribution `Reference`
//! (`nginx` is `docker.io/library/nginx:latest`). The digest is split off first and
//! checked for its shape only (`algorithm:encoded`): oci-spec also requires the full
//! length of known algorithms and refuses others, while a reference is left to the
//! runtime to judge beyond its shape.

use oci_spec::distribution::{ParseError, Reference};

/// The parts of a reference as written, split without judging them: the tag is looked
/// for in the last path component only, as a registry port has a colon too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parts<'a> {
    /// Everything before the tag and digest (`127.0.0.1:5000/app`, `nginx`).
    pub name: &'a str,
    pub tag: Option<&'a str>,
    pub digest: Option<&'a str>,
}

/// Splits `text` into its name, tag and digest.
pub fn split(text: &str) -> Parts<'_> {
    let (name_tag, digest) = match text.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (text, None),
    };
    let last = name_tag.rfind('/').map_or(0, |i| i + 1);
    match name_tag[last..].split_once(':') {
        Some((_, tag)) => Parts {
            name: &name_tag[..name_tag.len() - tag.len() - 1],
            tag: Some(tag),
            digest,
        },
        None => Parts {
            name: name_tag,
            tag: None,
            digest,
        },
    }
}

impl Parts<'_> {
    /// The reference with `:latest` when it names neither a tag nor a digest.
    pub fn with_default_tag(&self) -> String {
        let mut out = self.name.to_owned();
        match (self.tag, self.digest) {
            (None, None) => out.push_str(":latest"),
            (tag, digest) => {
                if let Some(t) = tag {
                    out.push(':');
                    out.push_str(t);
                }
                if let Some(d) = digest {
                    out.push('@');
                    out.push_str(d);
                }
            }
        }
        out
    }
}

/// Why a text is not an image reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageRefError {
    #[error("empty")]
    Empty,
    #[error("longer than 4096 characters")]
    TooLong,
    #[error("contains whitespace or control characters")]
    Whitespace,
    #[error("digest must look like algorithm:hex")]
    Digest,
    #[error("tag must be 1-128 of [A-Za-z0-9_.-], not starting with . or -")]
    Tag,
    #[error("repository path components must be lowercase [a-z0-9] joined by . _ -")]
    Path,
    #[error("repository name must not be more than 255 characters")]
    NameTooLong,
}

/// A valid reference, normalised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    reference: Reference,
    /// Whether the tag is oci-spec's default rather than written.
    tag_written: bool,
    digest: Option<String>,
}

impl ImageRef {
    /// Parses and checks `text`.
    pub fn parse(text: &str) -> Result<Self, ImageRefError> {
        if text.is_empty() {
            return Err(ImageRefError::Empty);
        }
        if text.len() > 4096 {
            return Err(ImageRefError::TooLong);
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ImageRefError::Whitespace);
        }
        let parts = split(text);
        if parts.digest.is_some_and(|d| !d.contains(':')) {
            return Err(ImageRefError::Digest);
        }
        let name_tag = text.split_once('@').map_or(text, |(n, _)| n);
        let reference = Reference::try_from(name_tag).map_err(|e| match e {
            ParseError::TagInvalidFormat => ImageRefError::Tag,
            ParseError::NameTooLong => ImageRefError::NameTooLong,
            ParseError::NameEmpty => ImageRefError::Empty,
            // oci-spec's one regular expression refuses a bad tag and a bad path alike
            _ if parts.tag.is_some_and(|t| !tag_shape_ok(t)) => ImageRefError::Tag,
            _ => ImageRefError::Path,
        })?;
        // oci-spec takes a first component that is no host for a path component without
        // checking its case (`UPPER/case`); no registry accepts it.
        if reference
            .repository()
            .chars()
            .any(|c| c.is_ascii_uppercase())
        {
            return Err(ImageRefError::Path);
        }
        Ok(Self {
            reference,
            tag_written: parts.tag.is_some(),
            digest: parts.digest.map(str::to_owned),
        })
    }

    /// The registry host, `docker.io` for Docker Hub (`nginx`, `index.docker.io/x/y`).
    pub fn registry(&self) -> &str {
        self.reference.registry()
    }

    /// The repository path in the registry (`library/nginx`).
    pub fn repository(&self) -> &str {
        self.reference.repository()
    }

    /// The tag, `latest` when neither a tag nor a digest is written.
    pub fn tag(&self) -> Option<&str> {
        if self.tag_written || self.digest.is_none() {
            self.reference.tag()
        } else {
            None
        }
    }

    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// The fully qualified form (`docker.io/library/nginx:latest`).
    pub fn normalized(&self) -> String {
        let mut out = format!("{}/{}", self.registry(), self.repository());
        if let Some(t) = self.tag() {
            out.push(':');
            out.push_str(t);
        }
        if let Some(d) = self.digest() {
            out.push('@');
            out.push_str(d);
        }
        out
    }
}

/// What oci-spec accepts as a tag: `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
fn tag_shape_ok(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 128
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        && !tag.starts_with(['.', '-'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_finds_the_tag_in_the_last_component_only() {
        let p = |name, tag, digest| Parts { name, tag, digest };
        for (text, want) in [
            ("nginx", p("nginx", None, None)),
            ("nginx:1.25", p("nginx", Some("1.25"), None)),
            ("127.0.0.1:5000/a/b", p("127.0.0.1:5000/a/b", None, None)),
            (
                "127.0.0.1:5000/a/b:v1",
                p("127.0.0.1:5000/a/b", Some("v1"), None),
            ),
            ("r/a@sha256:0123", p("r/a", None, Some("sha256:0123"))),
            ("r/a:v1@sha256:01", p("r/a", Some("v1"), Some("sha256:01"))),
        ] {
            assert_eq!(split(text), want, "{text}");
        }
        assert_eq!(split("nginx").with_default_tag(), "nginx:latest");
        assert_eq!(split("reg:5000/x").with_default_tag(), "reg:5000/x:latest");
        assert_eq!(split("nginx:1").with_default_tag(), "nginx:1");
        assert_eq!(split("n@sha256:ab").with_default_tag(), "n@sha256:ab");
    }

    #[test]
    fn docker_hub_names_are_normalised() {
        for (text, want) in [
            ("nginx", "docker.io/library/nginx:latest"),
            ("nginx:1.25", "docker.io/library/nginx:1.25"),
            ("library/nginx", "docker.io/library/nginx:latest"),
            ("bitnami/redis:7", "docker.io/bitnami/redis:7"),
            ("index.docker.io/x/y", "docker.io/x/y:latest"),
            ("127.0.0.1:5000/t/app:v1", "127.0.0.1:5000/t/app:v1"),
            ("localhost/a", "localhost/a:latest"),
            ("ghcr.io/o/r@sha256:ab", "ghcr.io/o/r@sha256:ab"),
        ] {
            let r = ImageRef::parse(text);
            assert_eq!(
                r.as_ref().map(ImageRef::normalized),
                Ok(want.into()),
                "{text}"
            );
        }
        let r = ImageRef::parse("nginx");
        assert_eq!(r.as_ref().map(ImageRef::registry), Ok("docker.io"));
        assert_eq!(r.as_ref().map(ImageRef::repository), Ok("library/nginx"));
    }

    #[test]
    fn invalid_references_say_why() {
        for (text, why) in [
            ("", ImageRefError::Empty),
            ("a b", ImageRefError::Whitespace),
            ("r/a@nodigest", ImageRefError::Digest),
            ("nginx:", ImageRefError::Tag),
            ("r/a:-x", ImageRefError::Tag),
            ("r/a:t$g", ImageRefError::Tag),
            ("Nginx:1", ImageRefError::Path),
            ("UPPER/case", ImageRefError::Path),
            ("a//b:1", ImageRefError::Path),
            ("127.0.0.1:5000/App:v1", ImageRefError::Path),
        ] {
            assert_eq!(ImageRef::parse(text), Err(why), "{text}");
        }
        assert_eq!(
            ImageRef::parse(&"a".repeat(5000)),
            Err(ImageRefError::TooLong)
        );
    }
}
