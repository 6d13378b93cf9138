use super::*;

#[test]
fn a_chunk_starting_a_request_gives_its_request_line() {
    for (chunk, line) in [
        (
            "POST /api/v1/namespaces/ns/pods?timeout=4000ms HTTP/1.1\r\nhost: x\r\n\r\n{}",
            Some("POST /api/v1/namespaces/ns/pods?timeout=4000ms HTTP/1.1"),
        ),
        (
            "PATCH /api/v1/namespaces/ns/pods/p/status HTTP/1.1\r\n\r\n",
            Some("PATCH /api/v1/namespaces/ns/pods/p/status HTTP/1.1"),
        ),
        // a body continued in a later chunk, a partial head, an answer
        ("{\"kind\":\"Pod\"}\r\n", None),
        ("POST /api/v1/namespaces/ns/pods HTTP/1.1", None),
        ("HTTP/1.1 201 Created\r\n\r\n", None),
        ("post /x HTTP/1.1\r\n", None),
    ] {
        assert_eq!(request_line(chunk.as_bytes()), line, "{chunk:?}");
    }
}

#[test]
fn a_request_length_is_its_head_and_content_length() {
    let head = "POST /p HTTP/1.1\r\nContent-Length: 7\r\nhost: x\r\n\r\n";
    for (chunk, length) in [
        (format!("{head}{{\"a\":1}}"), Some(head.len() + 7)),
        // the body not yet read: the length still counts it
        (head.to_owned(), Some(head.len() + 7)),
        (
            "GET /p HTTP/1.1\r\nhost: x\r\n\r\n".to_owned(),
            Some("GET /p HTTP/1.1\r\nhost: x\r\n\r\n".len()),
        ),
        (
            "POST /p HTTP/1.1\r\ncontent-length:  3 \r\n\r\nabc".to_owned(),
            Some("POST /p HTTP/1.1\r\ncontent-length:  3 \r\n\r\n".len() + 3),
        ),
        ("POST /p HTTP/1.1\r\nContent-Length: 7\r\n".to_owned(), None),
    ] {
        assert_eq!(request_length(chunk.as_bytes()), length, "{chunk:?}");
    }
}

#[test]
fn an_armed_trigger_fires_once_on_the_request_it_chooses() {
    let shared = Shared {
        frozen: watch::channel(false).0,
        held: AtomicU64::new(0),
        armed: Mutex::new(Some(Trigger {
            matches: Box::new(|line| line.starts_with("POST /api/v1/namespaces/ns/pods")),
            hold: Hold::Answer,
        })),
        fired: Mutex::new(None),
    };
    let get = b"GET /api/v1/namespaces/ns/pods HTTP/1.1\r\n\r\n";
    let post = b"POST /api/v1/namespaces/ns/pods HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
    assert_eq!(shared.fire_on(get), None);
    assert!(!shared.is_frozen());
    assert_eq!(shared.fire_on(post), Some(Hold::Answer));
    assert!(shared.is_frozen());
    let fired = shared.fired.lock().ok().and_then(|f| f.clone());
    let Some(fired) = fired else {
        panic!("the trigger recorded nothing of what it froze on");
    };
    assert_eq!(
        fired.request_line,
        "POST /api/v1/namespaces/ns/pods HTTP/1.1"
    );
    assert!(fired.request.ends_with("{}"));
    // disarmed: the same request again does not fire
    assert_eq!(shared.fire_on(post), None);
}
