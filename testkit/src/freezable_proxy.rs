//! A proxy to an API server that can be frozen, for tests that cut a component off the
//! API server.
//!
//! While frozen it forwards no byte in either direction and leaves new connections
//! unanswered: a network partition that keeps connections open, so requests hang instead
//! of failing. Thawed, it forwards what it held. It counts what the client sent while
//! frozen, so a test can wait until a request is held.
//!
//! The client speaks plain HTTP to the proxy (the kubeconfig it gets names
//! `http://127.0.0.1:<port>`, with the same credentials) and the proxy speaks TLS to the
//! API server: it sees each request line, so a test can freeze it at the moment a chosen
//! request is in flight ([`FreezableProxy::freeze_at`]), its request held before the API
//! server sees it or its answer held after the API server acted on it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::pki_types::pem::PemObject;

/// Where a request chosen with [`FreezableProxy::freeze_at`] is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// The request itself: the API server does not see it until the thaw.
    Request,
    /// Its answer: the request reaches the API server whole, the answer waits for the thaw.
    Answer,
}

/// Chooses the request that freezes the proxy, by its request line
/// (`POST /api/v1/namespaces/ns/pods?timeout=4000ms HTTP/1.1`).
pub type RequestMatcher = Box<dyn Fn(&str) -> bool + Send + Sync>;

/// The request that froze the proxy.
#[derive(Clone, Debug)]
pub struct Frozen {
    /// Its request line.
    pub request_line: String,
    /// What of it the proxy had read when it froze: its head, and usually its body.
    pub request: String,
    /// When it froze.
    pub at: SystemTime,
    pub hold: Hold,
}

struct Trigger {
    matches: RequestMatcher,
    hold: Hold,
}

/// What the connections share.
struct Shared {
    frozen: watch::Sender<bool>,
    /// What the client sent while frozen: bytes of open connections, plus one per new
    /// connection.
    held: AtomicU64,
    armed: Mutex<Option<Trigger>>,
    fired: Mutex<Option<Frozen>>,
}

impl Shared {
    fn is_frozen(&self) -> bool {
        *self.frozen.borrow()
    }

    /// When `chunk` (read from a client while not frozen) starts a request the armed
    /// trigger chooses: freezes, and says how it is held.
    fn fire_on(&self, chunk: &[u8]) -> Option<Hold> {
        let mut armed = self.armed.lock().ok()?;
        let trigger = armed.as_ref()?;
        let line = request_line(chunk)?;
        if !(trigger.matches)(line) {
            return None;
        }
        let hold = trigger.hold;
        let frozen = Frozen {
            request_line: line.to_owned(),
            request: String::from_utf8_lossy(chunk).into_owned(),
            at: SystemTime::now(),
            hold,
        };
        *armed = None;
        self.frozen.send_replace(true);
        if let Ok(mut fired) = self.fired.lock() {
            *fired = Some(frozen);
        }
        Some(hold)
    }
}

/// The request line `chunk` starts with, if it starts one (a method in capitals, a space).
fn request_line(chunk: &[u8]) -> Option<&str> {
    let end = chunk.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&chunk[..end]).ok()?;
    let (method, rest) = line.split_once(' ')?;
    (!method.is_empty()
        && method.bytes().all(|b| b.is_ascii_uppercase())
        && rest.contains(" HTTP/"))
    .then_some(line)
}

/// How many bytes the HTTP/1 request starting `chunk` has in all (head and
/// `Content-Length` body); None when its head is not whole in `chunk`.
pub fn request_length(chunk: &[u8]) -> Option<usize> {
    let head_end = chunk.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&chunk[..head_end]).ok()?;
    let body = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    Some(head_end + body)
}

pub struct FreezableProxy {
    kubeconfig: PathBuf,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for FreezableProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FreezableProxy")
            .field("kubeconfig", &self.kubeconfig)
            .field("frozen", &self.shared.is_frozen())
            .finish_non_exhaustive()
    }
}

/// The `key: value` of the first line of `text` with that key.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

impl FreezableProxy {
    /// Listens on a free loopback port in front of the `https://` server of the kubeconfig
    /// at `kubeconfig` (its CA given as `certificate-authority`, a file), and writes a copy
    /// of that kubeconfig naming the proxy instead.
    pub async fn start(kubeconfig: &Path) -> io::Result<Self> {
        let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        let text = std::fs::read_to_string(kubeconfig)?;
        let server = field(&text, "server")
            .ok_or_else(|| invalid("no server in the kubeconfig"))?
            .to_owned();
        let upstream = server
            .strip_prefix("https://")
            .ok_or_else(|| invalid("the kubeconfig's server is not https://"))?
            .trim_end_matches('/')
            .to_owned();
        let host = upstream
            .rsplit_once(':')
            .map_or(upstream.as_str(), |(h, _)| h)
            .to_owned();
        let ca = field(&text, "certificate-authority")
            .ok_or_else(|| invalid("no certificate-authority file in the kubeconfig"))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca)
            .map_err(|e| invalid(&format!("reading {ca}: {e}")))?
        {
            let cert = cert.map_err(|e| invalid(&format!("reading {ca}: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| invalid(&format!("a CA certificate in {ca}: {e}")))?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(&e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = TlsConnector::from(Arc::new(tls));
        let name = ServerName::try_from(host).map_err(|e| invalid(&e.to_string()))?;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let dir = tempfile::Builder::new()
            .prefix("inplace-api-proxy")
            .tempdir()?;
        let proxied = dir.path().join("kubeconfig");
        let rewritten: Vec<String> = text
            .lines()
            .filter(|l| !l.trim().starts_with("certificate-authority"))
            .map(|l| l.replace(&server, &format!("http://127.0.0.1:{port}")))
            .collect();
        std::fs::write(&proxied, rewritten.join("\n") + "\n")?;
        let shared = Arc::new(Shared {
            frozen: watch::channel(false).0,
            held: AtomicU64::new(0),
            armed: Mutex::new(None),
            fired: Mutex::new(None),
        });
        let state = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let (upstream, state) = (upstream.clone(), state.clone());
                let (connector, name) = (connector.clone(), name.clone());
                tokio::spawn(async move {
                    if state.is_frozen() {
                        state.held.fetch_add(1, Ordering::Relaxed);
                    }
                    thawed(&state).await;
                    let Ok(up) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let Ok(up) = connector.connect(name, up).await else {
                        return;
                    };
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = tokio::io::split(up);
                    tokio::join!(
                        pump(dr, uw, state.clone(), true),
                        pump(ur, dw, state, false)
                    );
                });
            }
        });
        Ok(Self {
            kubeconfig: proxied,
            shared,
            task,
            _dir: dir,
        })
    }

    /// The kubeconfig that reaches the API server through this proxy.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn freeze(&self) {
        self.shared.frozen.send_replace(true);
    }

    pub fn thaw(&self) {
        self.shared.frozen.send_replace(false);
    }

    /// Freezes the proxy when the next request `matches` chooses (by its request line)
    /// starts, held as `hold` says; [`Self::frozen_on`] then tells which request and when.
    /// Replaces a trigger armed before that has not fired.
    pub fn freeze_at(&self, hold: Hold, matches: RequestMatcher) {
        if let Ok(mut armed) = self.shared.armed.lock() {
            *armed = Some(Trigger { matches, hold });
        }
    }

    /// The request a [`Self::freeze_at`] trigger froze the proxy on, once it has.
    pub fn frozen_on(&self) -> Option<Frozen> {
        self.shared.fired.lock().ok()?.clone()
    }

    /// What the client sent while frozen (bytes, plus one per new connection): non-zero
    /// once a request waits in the proxy.
    pub fn held_from_client(&self) -> u64 {
        self.shared.held.load(Ordering::Relaxed)
    }
}

impl Drop for FreezableProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Returns once the proxy is not frozen.
async fn thawed(state: &Shared) {
    let mut rx = state.frozen.subscribe();
    let _ = rx.wait_for(|frozen| !frozen).await;
}

/// Copies `from` to `to`, holding each chunk while the proxy is frozen. From the client
/// (`from_client`), it counts the bytes it holds, and a chunk starting the request an
/// armed trigger chooses freezes the proxy: that request is then held, or let through
/// whole with only its answer held.
async fn pump<R, W>(mut from: R, mut to: W, state: Arc<Shared>, from_client: bool)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    // Bytes of the chosen request still to let through the freeze (Hold::Answer).
    let mut let_through = 0usize;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if from_client
            && let_through == 0
            && !state.is_frozen()
            && let Some(Hold::Answer) = state.fire_on(chunk)
        {
            // An unknown length (head not whole in this chunk): this chunk only.
            let_through = request_length(chunk).unwrap_or(n);
        }
        if let_through > 0 {
            let_through = let_through.saturating_sub(n);
            if to.write_all(chunk).await.is_err() || to.flush().await.is_err() {
                break;
            }
            continue;
        }
        if from_client && state.is_frozen() {
            state.held.fetch_add(n as u64, Ordering::Relaxed);
        }
        thawed(&state).await;
        if to.write_all(chunk).await.is_err() || to.flush().await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests;
