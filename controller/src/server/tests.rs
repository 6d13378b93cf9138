use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::*;

#[test]
fn readiness_table() {
    use Phase::*;
    // (phase, caches synced, stopping) -> ready
    let table = [
        (Starting, false, false, false),
        (Starting, true, false, false),
        (Standby, false, false, true),
        (Standby, true, false, true),
        (Leading, false, false, false),
        (Leading, true, false, true),
        (Starting, false, true, false),
        (Standby, false, true, false),
        (Leading, true, true, false),
    ];
    for (phase, synced, stopping, want) in table {
        assert_eq!(
            readiness(phase, synced, stopping).0,
            want,
            "{phase:?} synced={synced} stopping={stopping}"
        );
    }
}

#[test]
fn health_round_trips_the_phase() {
    let h = Health::default();
    assert_eq!(h.phase(), Phase::Starting);
    assert!(!h.readiness().0);
    h.set_phase(Phase::Standby);
    assert_eq!(
        h.readiness(),
        (true, "ok: standby, waiting for the leader lease")
    );
    h.set_phase(Phase::Leading);
    assert_eq!(h.readiness(), (false, "leader: caches not synced"));
    h.caches_synced.store(true, Ordering::Relaxed);
    assert_eq!(h.readiness(), (true, "ok: leader"));
    h.stopping.store(true, Ordering::Relaxed);
    assert_eq!(h.readiness(), (false, "stopping"));
}

#[tokio::test]
async fn readyz_serves_the_phase() -> Result<(), Box<dyn std::error::Error>> {
    let health = Arc::new(Health::default());
    let (addr, server) = serve(
        "127.0.0.1:0".parse()?,
        Arc::new(Metrics::new()),
        health.clone(),
    )
    .await?;
    let get = |path: &'static str| async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        conn.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut raw = String::new();
        conn.read_to_string(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    assert!(get("/readyz").await?.starts_with("HTTP/1.1 503"));
    health.set_phase(Phase::Standby);
    let standby = get("/readyz").await?;
    assert!(standby.starts_with("HTTP/1.1 200"), "{standby}");
    assert!(standby.contains("standby"), "{standby}");
    assert!(get("/healthz").await?.starts_with("HTTP/1.1 200"));
    server.abort();
    Ok(())
}
