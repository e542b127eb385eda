//! The unit tests of the ring, its subscriptions and its input.

use super::ring::*;
use super::subscription::Subscription;
use super::wire::*;
use crate::kube::remote::TermSize;
use crate::session::machine::OutStream;
use crossbeam_channel::bounded;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tungstenite::protocol::CloseFrame;
use tungstenite::Bytes;

#[test]
fn a_restored_ring_continues_its_seqs_and_replays_across_the_restart() {
    let before = Arc::new(AppIo::new(1 << 20));
    for i in 1..=5u8 {
        before.push(OutStream::Stdout, vec![b'0' + i]);
    }
    let img = before.ring_image();
    let io = Arc::new(AppIo::restore(1 << 20, img.clone()));
    assert_eq!(io.last_seq(), 5);
    assert_eq!(io.last_output_ns(), img.last_output_ns);
    assert_eq!(io.push(OutStream::Stdout, b"6".to_vec()), Some(6));
    // A viewer that saw seq 3 before the restart: 4, 5, then 6.
    let mut s = io.subscribe(Some(3));
    let seqs: Vec<u32> = (0..3).map(|_| frame(s.recv()).0).collect();
    assert_eq!(seqs, [4, 5, 6]);
    // A damaged image: only the run that ends at next_seq - 1 stays.
    let mut bad = img;
    bad.frames.remove(2); // seq 3
    let io = Arc::new(AppIo::restore(1 << 20, bad));
    let mut s = io.subscribe(Some(0));
    assert_eq!(s.recv(), Some(Item::Gap { from: 1, to: 3 }));
    assert_eq!(frame(s.recv()).0, 4);
    // The bound applies to what is restored.
    let small = AppIo::restore(2 * (1 + FRAME_COST), before.ring_image());
    assert_eq!(small.ring_usage().0, 2);
}

#[test]
fn gap_notices_hold_a_seq_and_join_adjacent_gaps_in_replays() {
    let io = Arc::new(AppIo::new(3 * (1 + FRAME_COST)));
    let mut live = io.subscribe(None);
    io.push(OutStream::Stdout, b"a".to_vec());
    assert_eq!(io.push_gap(), Some(2));
    assert_eq!(io.push_gap(), Some(3));
    io.push(OutStream::Stdout, b"d".to_vec());
    assert_eq!(frame(live.recv()).0, 1);
    assert_eq!(live.recv(), Some(Item::Gap { from: 2, to: 2 }));
    assert_eq!(live.recv(), Some(Item::Gap { from: 3, to: 3 }));
    assert_eq!(frame(live.recv()).0, 4);
    // Seq 1 is evicted: its gap and the notices become one.
    let mut s = io.subscribe(None);
    assert_eq!(s.recv(), Some(Item::Gap { from: 1, to: 3 }));
    assert_eq!(frame(s.recv()).0, 4);
    // Gap notices are not output: the last output's time stays.
    let t = io.last_output_ns();
    io.push_gap();
    assert_eq!(io.last_output_ns(), t);
}

#[test]
fn held_output_waits_for_the_recovered_output_without_the_overlap() {
    let io = Arc::new(AppIo::new(1 << 20));
    io.push(OutStream::Stdout, b"before\n".to_vec());
    let mut s = io.subscribe(Some(1));
    let h = io.hold();
    assert!(io.is_holding());
    // The new attach streams while the log is read: held, no seq yet.
    assert_eq!(io.push(OutStream::Stdout, b"c\nd".to_vec()), None);
    assert_eq!(io.push(OutStream::Stderr, b"\ne\n".to_vec()), None);
    assert_eq!(io.last_seq(), 1);
    assert!(s.recv_timeout(Duration::ZERO).is_err());
    // The log holds a, b, and c and d again (written after the attach
    // began): they are dropped from the recovery.
    let lines = ["a\n", "b\n", "c\n", "d\n"].map(|l| Bytes::from_static(l.as_bytes()));
    assert_eq!(io.held_covers(h, &lines), 2);
    io.release(h, Recovered::Complete(lines.to_vec()), OutStream::Stdout);
    assert!(!io.is_holding());
    // The recovered lines come as one frame (a viewer's queue counts
    // frames), then the held output as it came.
    let got: Vec<(u32, u8, Vec<u8>)> = (0..3).map(|_| frame(s.recv())).collect();
    assert_eq!(
        got,
        [
            (2, 1, b"a\nb\n".to_vec()),
            (3, 1, b"c\nd".to_vec()),
            (4, 2, b"\ne\n".to_vec())
        ]
    );
    assert!(!io.holds(h), "released");
    assert_eq!(io.held_covers(h, &lines), 4, "nothing left to wait for");
    // No log: a gap notice where the downtime's output would be.
    let h = io.hold();
    io.push(OutStream::Stdout, b"f\n".to_vec());
    io.release(h, Recovered::Unavailable, OutStream::Stdout);
    assert_eq!(s.recv(), Some(Item::Gap { from: 5, to: 5 }));
    assert_eq!(frame(s.recv()), (6, 1, b"f\n".to_vec()));
    // Only the oldest part of a long log: it, then a gap notice.
    let h = io.hold();
    io.release(
        h,
        Recovered::Truncated(vec![Bytes::from_static(b"g\n")]),
        OutStream::Stdout,
    );
    assert_eq!(frame(s.recv()), (7, 1, b"g\n".to_vec()));
    assert_eq!(s.recv(), Some(Item::Gap { from: 8, to: 8 }));
    // Held output over the bound: the oldest goes, and a gap says so.
    let io = Arc::new(AppIo::new(2 * (2 + FRAME_COST)));
    let h = io.hold();
    for x in [b"1\n", b"2\n", b"3\n"] {
        io.push(OutStream::Stdout, x.to_vec());
    }
    io.release(
        h,
        Recovered::Complete(vec![Bytes::from_static(b"r\n")]),
        OutStream::Stdout,
    );
    let mut s = io.subscribe(Some(0));
    assert_eq!(s.recv(), Some(Item::Gap { from: 1, to: 2 }));
    assert_eq!(frame(s.recv()), (3, 1, b"2\n".to_vec()));
    assert_eq!(frame(s.recv()), (4, 1, b"3\n".to_vec()));
}

/// What viewers were given last, for a recovery to compare with the
/// log: data of every stream in seq order, no gap notices, cut to `max`.
#[test]
fn the_delivered_tail_is_the_rings_last_output() {
    let io = AppIo::new(1 << 20);
    assert!(io.delivered_tail(10).is_empty());
    io.push(OutStream::Stdout, b"a\n".to_vec());
    io.push(OutStream::Stderr, b"b\n".to_vec());
    let h = io.hold();
    io.release(h, Recovered::Unavailable, OutStream::Stdout);
    io.push(OutStream::Stdout, b"cd\n".to_vec());
    assert_eq!(io.delivered_tail(100), b"a\nb\ncd\n");
    assert_eq!(io.delivered_tail(4), b"\ncd\n");
}

/// A re-attach cut while its recovery still reads the log, then a newer
/// one that fails, then one that works (a cut just before an outage): the
/// failed one does not end the first one's hold (that let its held lines
/// out after a hole its own recovery never filled), and only the last
/// attach's recovery counts. Nothing is lost, nothing repeated.
#[test]
fn only_the_newest_hold_is_released_and_a_failed_attach_ends_no_other() {
    let io = Arc::new(AppIo::new(1 << 20));
    io.push(OutStream::Stdout, line(1));
    let mut s = io.subscribe(Some(1));
    // Attach A: up, delivers 4 (2 and 3 were written before it was up),
    // then its stream is cut; its recovery is still reading.
    let a = io.hold();
    io.push(OutStream::Stdout, line(4));
    assert!(io.held_has_output(a));
    // Attach B (the cut's re-attach) fails in the outage.
    let b = io.hold();
    assert!(!io.holds(a) && io.holds(b));
    assert!(io.held_has_output(a), "A has nothing left to wait for");
    io.release(b, Recovered::Complete(Vec::new()), OutStream::Stdout);
    // A's recovery ends late: replaced, it releases nothing.
    io.release(
        a,
        Recovered::Complete(vec![line(2), line(3), line(4)]),
        OutStream::Stdout,
    );
    assert!(
        s.recv_timeout(Duration::from_millis(20)).is_err(),
        "nothing yet"
    );
    // Attach C after the outage: up, delivers 7; its recovery reads the
    // log from the same last output (1), up to 7.
    let c = io.hold();
    io.push(OutStream::Stdout, line(7));
    let log: Vec<Bytes> = (2..=7).map(line).collect();
    assert_eq!(io.held_covers(c, &log), 1);
    io.release(c, Recovered::Complete(log), OutStream::Stdout);
    let got: Vec<u8> = queued(&mut s).into_iter().flat_map(|f| f.1).collect();
    assert_eq!(got, b"2\n3\n4\n5\n6\n7\n");
}

/// A recovery that read the log only after its attach's stream was cut
/// (the read failed at the cut and was tried again): the log holds the
/// lines the attach delivered into the hold and those written after. They
/// come once, in order, from the log; the held copy goes (it was once
/// appended after them: lines repeated, and the next recovery, matching
/// the log against that tail, lost the lines after it).
#[test]
fn a_log_read_after_the_stream_ended_replaces_the_held_copy() {
    let io = Arc::new(AppIo::new(1 << 20));
    io.push(OutStream::Stdout, line(1));
    let mut s = io.subscribe(Some(1));
    let h = io.hold();
    io.push(OutStream::Stdout, line(3));
    io.push(OutStream::Stdout, line(4));
    io.push_notice(OutStream::Stderr, b"[kubegate] attach lost\r\n".to_vec());
    let log: Vec<Bytes> = (2..=6).map(line).collect();
    assert!(held_within(&log, b"3\n4\n"));
    assert!(!held_within(&log, b"4\n3\n"));
    assert!(!held_within(&log, b""));
    assert_eq!(io.held_covers(h, &log), 0);
    io.release(h, Recovered::Complete(log), OutStream::Stdout);
    let (mut out, mut notices) = (Vec::new(), Vec::new());
    for (stream, data) in queued(&mut s) {
        if stream == 1 {
            out.extend(data);
        } else {
            notices.extend(data);
        }
    }
    assert_eq!(out, b"2\n3\n4\n5\n6\n");
    assert_eq!(notices, b"[kubegate] attach lost\r\n");
    assert_eq!(io.delivered_tail(100), b"1\n2\n3\n4\n5\n6\n");
}

/// kubegate's own text in an app's stream (`[kubegate] attach lost…`,
/// pushed when a stream is cut) is not the app's output: viewers get it,
/// but the log recovery neither starts from it nor compares it with the
/// container log. Counted as output, it ended the delivered tail (no log
/// line matched) and moved the time rule past the lines in flight at the
/// cut: one burst of the soak's app lost at nearly every cut on a real
/// API server (`scripts/soak.sh --real`).
#[test]
fn kubegates_own_notices_are_not_the_apps_output() {
    let io = Arc::new(AppIo::new(1 << 20));
    io.push(OutStream::Stdout, b"a\n".to_vec());
    let last = io.last_output_ns();
    assert!(last > 0);
    std::thread::sleep(Duration::from_millis(2));
    let n = io.push_notice(
        OutStream::Stderr,
        b"\r\n[kubegate] attach lost\r\n".to_vec(),
    );
    assert_eq!(n, Some(2), "viewers get the notice in seq order");
    assert_eq!(io.last_output_ns(), last, "a notice is not the last output");
    assert_eq!(io.delivered_tail(100), b"a\n");
    // Held: a notice is not the attach delivering, nor part of the held
    // output the recovered lines overlap.
    let h = io.hold();
    io.push_notice(OutStream::Stderr, b"[kubegate] again\r\n".to_vec());
    assert!(!io.held_has_output(h));
    io.push(OutStream::Stdout, b"c\n".to_vec());
    assert!(io.held_has_output(h));
    let rec = vec![Bytes::from_static(b"b\n"), Bytes::from_static(b"c\n")];
    assert_eq!(io.held_covers(h, &rec), 1);
    io.release(h, Recovered::Complete(rec), OutStream::Stdout);
    assert_eq!(io.delivered_tail(100), b"a\nb\nc\n");
    let mut s = io.subscribe(Some(0));
    let got: Vec<Vec<u8>> = (0..5).map(|_| frame(s.recv()).2).collect();
    assert_eq!(
        got,
        [
            &b"a\n"[..],
            b"\r\n[kubegate] attach lost\r\n",
            b"b\n",
            b"[kubegate] again\r\n",
            b"c\n"
        ]
    );
}

/// A long recovery (minutes of output after an outage) is a few frames of
/// at most 16 KiB, never one per line: a viewer's queue counts frames, and
/// a burst of thousands cut the very viewer it was for (seen in
/// `scripts/soak.sh --real`). Nothing is lost or reordered.
#[test]
fn recovered_lines_are_joined_into_few_frames() {
    let io = Arc::new(AppIo::new(4 << 20));
    let mut s = io.subscribe(Some(0));
    let h = io.hold();
    let lines: Vec<Bytes> = (0..5000)
        .map(|i| Bytes::from(format!("line {i:05} ........\n")))
        .collect();
    let want: Vec<u8> = lines.iter().flat_map(|l| l.iter().copied()).collect();
    io.release(h, Recovered::Complete(lines), OutStream::Stdout);
    let mut got = Vec::new();
    let mut frames = 0;
    while got.len() < want.len() {
        let (_, st, d) = frame(s.recv());
        assert_eq!(st, 1);
        assert!(d.len() <= 16 << 10, "{}", d.len());
        got.extend_from_slice(&d);
        frames += 1;
    }
    assert_eq!(got, want);
    assert!(frames <= 8, "{frames} frames");
}

#[test]
fn the_overlap_is_the_longest_run_of_trailing_lines_the_held_output_starts_with() {
    let b = |l: &[&'static str]| -> Vec<Bytes> {
        l.iter().map(|x| Bytes::from_static(x.as_bytes())).collect()
    };
    assert_eq!(held_overlap(&b(&["a\n", "b\n"]), b""), 0);
    assert_eq!(held_overlap(&b(&["a\n", "b\n"]), b"b\nc\n"), 1);
    assert_eq!(held_overlap(&b(&["a\n", "b\n"]), b"a\nb\nc"), 2);
    assert_eq!(held_overlap(&b(&["a\n", "b\n"]), b"c\n"), 0);
    // Not a prefix of the held output: not an overlap.
    assert_eq!(held_overlap(&b(&["a\n", "b\n"]), b"xb\n"), 0);
    // Repeated lines: the longest match.
    assert_eq!(held_overlap(&b(&["x\n", "x\n", "x\n"]), b"x\nx\n"), 2);
    assert_eq!(held_overlap(&[], b"x"), 0);
}

/// Line `n` of a recovery test's app.
fn line(n: u32) -> Bytes {
    Bytes::from(format!("{n}\n"))
}

/// The frames a subscription has queued now (stream, data), in order.
fn queued(s: &mut Subscription) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while let Ok(i) = s.recv_timeout(Duration::from_millis(20)) {
        let (_, stream, data) = frame(i);
        out.push((stream, data));
    }
    out
}

fn frame(i: Option<Item>) -> (u32, u8, Vec<u8>) {
    match i {
        Some(Item::Frame { seq, stream, data }) => (seq, stream, data.to_vec()),
        other => panic!("expected a frame, got {other:?}"),
    }
}

#[test]
fn ring_evicts_by_bytes_and_seqs_continue() {
    let io = Arc::new(AppIo::new(3 * (10 + FRAME_COST)));
    assert_eq!(io.push(OutStream::Stdout, Vec::new()), None);
    for i in 1..=5u32 {
        assert_eq!(io.push(OutStream::Stdout, vec![b'a'; 10]), Some(i));
    }
    assert_eq!(io.ring_usage().0, 3);
    assert_eq!(io.ring_usage().1, 3 * (10 + FRAME_COST));
    assert_eq!(io.last_seq(), 5);
    // A big frame evicts several small ones.
    assert_eq!(
        io.push(OutStream::Stderr, vec![b'b'; 10 + FRAME_COST]),
        Some(6)
    );
    assert_eq!(io.ring_usage().0, 2);
    // Everything buffered, with the gap from 1.
    let mut s = io.subscribe(None);
    assert_eq!(s.recv(), Some(Item::Gap { from: 1, to: 4 }));
    assert_eq!(frame(s.recv()).0, 5);
    assert_eq!(frame(s.recv()), (6, 2, vec![b'b'; 10 + FRAME_COST]));
    // A frame bigger than the ring evicts everything, itself included;
    // seqs go on.
    assert_eq!(io.push(OutStream::Stdout, vec![0; 4 * FRAME_COST]), Some(7));
    assert_eq!(io.ring_usage().0, 0);
    assert_eq!(io.push(OutStream::Stdout, b"x".to_vec()), Some(8));
    assert_eq!(frame(s.recv()).0, 7);
    assert_eq!(frame(s.recv()).0, 8);
}

#[test]
fn replay_after_last_seq_and_gaps() {
    let io = Arc::new(AppIo::new(4 * (1 + FRAME_COST)));
    for i in 1..=6u8 {
        io.push(OutStream::Tty, vec![i]);
    }
    // Buffered: 3..=6.
    let seqs = |s: &mut Subscription| {
        let mut v = Vec::new();
        while let Ok(Some(i)) = s.recv_timeout(Duration::ZERO) {
            v.push(match i {
                Item::Frame { seq, .. } => format!("{seq}"),
                Item::Gap { from, to } => format!("gap {from}-{to}"),
                Item::Close { code, .. } => format!("close {code}"),
            });
        }
        v
    };
    assert_eq!(seqs(&mut io.subscribe(Some(4))), ["5", "6"]);
    assert_eq!(seqs(&mut io.subscribe(Some(2))), ["3", "4", "5", "6"]);
    assert_eq!(
        seqs(&mut io.subscribe(Some(1))),
        ["gap 2-2", "3", "4", "5", "6"]
    );
    assert_eq!(
        seqs(&mut io.subscribe(Some(0))),
        ["gap 1-2", "3", "4", "5", "6"]
    );
    assert_eq!(seqs(&mut io.subscribe(Some(6))), Vec::<String>::new());
    // Ahead of the newest frame (the daemon restarted): everything.
    assert_eq!(
        seqs(&mut io.subscribe(Some(99))),
        ["gap 1-2", "3", "4", "5", "6"]
    );
    // Live frames follow the replay; end closes after queued frames.
    let mut s = io.subscribe(Some(5));
    io.push(OutStream::Tty, b"7".to_vec());
    io.end(CLOSE_ENDED, "session ended");
    assert_eq!(io.push(OutStream::Tty, b"8".to_vec()), None);
    assert_eq!(seqs(&mut s), ["6", "7", "close 1000"]);
    assert_eq!(s.recv(), None);
    assert_eq!(io.subscribers(), 0);
    // After the end: the replay, then the close.
    assert_eq!(seqs(&mut io.subscribe(Some(5))), ["6", "7", "close 1000"]);
    // An empty AppIo replays nothing.
    let empty = Arc::new(AppIo::new(1 << 20));
    assert_eq!(seqs(&mut empty.subscribe(None)), Vec::<String>::new());
    assert_eq!(seqs(&mut empty.subscribe(Some(3))), Vec::<String>::new());
}

#[test]
fn dropping_or_cancelling_unsubscribes() {
    let io = Arc::new(AppIo::new(1 << 20));
    let a = io.subscribe(None);
    let mut b = io.subscribe(None);
    assert_eq!(io.subscribers(), 2);
    drop(a);
    assert_eq!(io.subscribers(), 1);
    io.push(OutStream::Stdout, b"x".to_vec());
    b.canceller().cancel();
    assert_eq!(io.subscribers(), 0);
    // What it held, then the end without a close.
    assert_eq!(frame(b.recv()).0, 1);
    assert_eq!(b.recv(), None);
}

#[test]
fn replay_and_live_are_atomic() {
    const N: u32 = 20_000;
    let io = Arc::new(AppIo::new(1 << 30).with_queue_frames(N as usize));
    let pusher = {
        let io = io.clone();
        std::thread::spawn(move || {
            for i in 0..N {
                io.push(OutStream::Stdout, i.to_be_bytes().to_vec());
            }
        })
    };
    let mut readers = Vec::new();
    for k in 0..8u32 {
        // Subscribe at various moments of the push, from various seqs.
        while io.last_seq() < k * N / 10 {
            std::thread::yield_now();
        }
        let last = (k % 2 == 1).then(|| io.last_seq().saturating_sub(k * 7));
        let mut s = io.subscribe(last);
        readers.push(std::thread::spawn(move || {
            let mut expect = last.unwrap_or(0) + 1;
            while expect <= N {
                let (seq, _, data) = frame(s.recv_timeout(Duration::from_secs(30)).ok().flatten());
                assert_eq!(seq, expect, "subscriber {k}");
                assert_eq!(data, (seq - 1).to_be_bytes());
                expect += 1;
            }
        }));
    }
    pusher.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
}

#[test]
fn slow_subscriber_is_closed_while_a_fast_one_gets_everything() {
    let io = Arc::new(AppIo::new(1 << 20).with_queue_frames(8));
    let mut slow = io.subscribe(None);
    let (hook_tx, hook_rx) = bounded::<CloseFrame>(2);
    slow.on_slow(move |f| {
        let _ = hook_tx.try_send(f);
    });
    let mut fast = io.subscribe(None);
    let t = Instant::now();
    for i in 1..=2000u32 {
        // push never waits: the slow subscriber is cut instead.
        assert_eq!(
            io.push(OutStream::Stdout, i.to_be_bytes().to_vec()),
            Some(i)
        );
        let (seq, stream, data) = frame(fast.recv_timeout(Duration::ZERO).ok().flatten());
        assert_eq!((seq, stream, data), (i, 1, i.to_be_bytes().to_vec()));
    }
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(io.subscribers(), 1);
    let f = hook_rx.try_recv().expect("the hook ran");
    assert_eq!(u16::from(f.code), CLOSE_SLOW);
    assert_eq!(f.reason.as_str(), SLOW_REASON);
    assert!(hook_rx.try_recv().is_err(), "hook called once");
    // The slow one gets what its queue held, then 4001.
    for want in 1..=8u32 {
        assert_eq!(frame(slow.recv()).0, want);
    }
    assert_eq!(
        slow.recv(),
        Some(Item::Close {
            code: CLOSE_SLOW,
            reason: SLOW_REASON.into()
        })
    );
    assert_eq!(slow.recv(), None);
    // A hook set after the fact fires at once.
    let (tx2, rx2) = bounded::<CloseFrame>(1);
    slow.on_slow(move |f| {
        let _ = tx2.try_send(f);
    });
    assert!(rx2.try_recv().is_ok());
    // It reconnects from its last seq and misses nothing.
    let mut again = io.subscribe(Some(8));
    assert_eq!(frame(again.recv()).0, 9);
    // The fast one ends with the session.
    io.end(CLOSE_ENDED, "session ended");
    assert_eq!(
        fast.recv(),
        Some(Item::Close {
            code: CLOSE_ENDED,
            reason: "session ended".into()
        })
    );
}

#[test]
fn an_idle_app_holds_no_buffer() {
    let io = AppIo::new(1 << 20);
    assert_eq!(io.ring_usage(), (0, 0, 0));
    assert!(std::mem::size_of::<AppIo>() < 512);
    let io = Arc::new(io);
    io.push(OutStream::Stdout, b"hello".to_vec());
    let (n, bytes, cap) = io.ring_usage();
    assert_eq!((n, bytes), (1, 5 + FRAME_COST));
    assert!(cap < 64, "{cap}");
}

#[test]
fn input_without_attach_is_dropped_and_sizes_are_kept() {
    let io = AppIo::new(1024);
    assert!(!io.has_input());
    assert!(!io.stdin(b"x"));
    assert!(!io.resize(100, 30));
    assert_eq!(
        io.term_size(),
        Some(TermSize {
            width: 100,
            height: 30
        })
    );
    assert!(!io.resize(0, 30));
    // Clearing someone else's input is a no-op.
    let id = io.set_input(None);
    io.clear_input(id + 1);
}
