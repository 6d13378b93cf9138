//! A TCP proxy in front of the bed's registry that cuts image pulls halfway: while faults
//! are on, a connection is, with the seed's draw (one in two), closed once it has carried
//! N bytes (N drawn in 100–2,500) towards containerd: in the middle of a manifest, a
//! config or a layer (the test image's own layer is small; its base is shared with v1). containerd reaches the registry through it when an image is named by the
//! proxy's address (`127.0.0.1:PORT/...`; the bed's `certs.d` says it is plain HTTP).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::rng::Rng;

struct State {
    upstream: String,
    faults: AtomicBool,
    rng: Mutex<Rng>,
    cuts: AtomicU64,
}

/// The proxy; stops accepting when dropped.
pub struct PullProxy {
    port: u16,
    state: Arc<State>,
    accept: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for PullProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullProxy")
            .field("port", &self.port)
            .field("upstream", &self.state.upstream)
            .finish_non_exhaustive()
    }
}

impl PullProxy {
    /// Listens on 127.0.0.1 (a free port) and forwards to `upstream` (`host:port`).
    pub async fn start(upstream: &str, rng: Rng) -> std::io::Result<PullProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(State {
            upstream: upstream.to_owned(),
            faults: AtomicBool::new(false),
            rng: Mutex::new(rng),
            cuts: AtomicU64::new(0),
        });
        let accept = {
            let state = state.clone();
            tokio::spawn(async move {
                while let Ok((down, _)) = listener.accept().await {
                    tokio::spawn(connection(state.clone(), down));
                }
            })
        };
        Ok(PullProxy {
            port,
            state,
            accept,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn set_faults(&self, on: bool) {
        self.state.faults.store(on, Ordering::SeqCst);
    }

    /// Connections cut so far (only those that reached their cut).
    pub fn cuts(&self) -> u64 {
        self.state.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for PullProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn connection(state: Arc<State>, down: TcpStream) {
    let cut_at = if state.faults.load(Ordering::SeqCst) {
        state
            .rng
            .lock()
            .ok()
            .and_then(|mut r| r.chance(500).then(|| r.range(100, 2500)))
    } else {
        None
    };
    let Ok(up) = TcpStream::connect(&state.upstream).await else {
        return;
    };
    let (mut down_r, mut down_w) = down.into_split();
    let (mut up_r, mut up_w) = up.into_split();
    let requests = async {
        let _ = tokio::io::copy(&mut down_r, &mut up_w).await;
        let _ = up_w.shutdown().await;
    };
    let answers = async {
        let mut buf = vec![0u8; 16 * 1024];
        let mut sent = 0u64;
        loop {
            let Ok(n) = up_r.read(&mut buf).await else {
                return;
            };
            if n == 0 {
                let _ = down_w.shutdown().await;
                return;
            }
            let mut take = n;
            if let Some(cut) = cut_at {
                let left = usize::try_from(cut.saturating_sub(sent)).unwrap_or(usize::MAX);
                if left <= n {
                    take = left;
                }
            }
            if down_w.write_all(&buf[..take]).await.is_err() {
                return;
            }
            sent += take as u64;
            if take < n || cut_at == Some(sent) {
                state.cuts.fetch_add(1, Ordering::SeqCst);
                return;
            }
        }
    };
    // The answers decide: once they end (or are cut), both sides are dropped.
    tokio::select! {
        () = answers => {}
        () = async { requests.await; std::future::pending::<()>().await } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that sends 50,000 bytes: with faults off all arrive; with faults on and
    /// a seed that cuts, the connection ends after the drawn count, short of the whole.
    #[tokio::test]
    async fn passes_whole_answers_and_cuts_them_when_faulted()
    -> Result<(), Box<dyn std::error::Error>> {
        let upstream = TcpListener::bind("127.0.0.1:0").await?;
        let addr = upstream.local_addr()?.to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = upstream.accept().await {
                tokio::spawn(async move {
                    let _ = s.write_all(&[7u8; 50_000]).await;
                });
            }
        });
        let read_all = |port: u16| async move {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
            let mut got = Vec::new();
            s.read_to_end(&mut got).await?;
            Ok::<usize, std::io::Error>(got.len())
        };
        let proxy = PullProxy::start(&addr, Rng::new(1)).await?;
        assert_eq!(read_all(proxy.port()).await?, 50_000);
        proxy.set_faults(true);
        let mut lengths = Vec::new();
        for _ in 0..8 {
            lengths.push(read_all(proxy.port()).await.unwrap_or(0));
        }
        let cut = lengths.iter().filter(|n| **n < 50_000).count() as u64;
        assert!(cut > 0, "{lengths:?}");
        assert_eq!(proxy.cuts(), cut, "{lengths:?}");
        assert!(
            lengths
                .iter()
                .all(|n| *n == 50_000 || (100..=2500).contains(n)),
            "{lengths:?}"
        );
        Ok(())
    }
}
