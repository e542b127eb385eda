//! WebSocket connections after the upgrade (owned by the http helper).

/// An upgraded WebSocket connection, ready to be driven.
pub struct WsConn {
    _private: (),
}
