//! TLS for ureq with OUR rustls `ClientConfig` (from `kube::tls_client`):
//! the one place the client's HTTP stack meets rustls.
//!
//! Why a connector of our own: ureq's `TlsConfig` cannot express a
//! kubeconfig's `tls-server-name`, and would build a second, different
//! rustls configuration from the same material (crates.md). So the agent's
//! connector chain is ureq's `TcpConnector` (which registers every socket
//! for `Agent::shutdown`, so watches stay cancellable) followed by
//! [`KubeTlsConnector`], written like ureq's own `RustlsConnector` but
//! holding an `Arc<ClientConfig>` and the server name to verify.
//!
//! What it never does: proxies. The chain has no CONNECT/SOCKS step, and the
//! agents are built with `.proxy(None)`, so `HTTPS_PROXY` is not honoured
//! (kubeconfig `proxy-url` is not supported either). `ureq::unversioned` has
//! no semver promise: this file is what to fix on a ureq upgrade.

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use std::fmt;
use std::io::{Read, Write};
use std::sync::Arc;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, TcpConnector,
    Transport, TransportAdapter,
};

/// What an `https://` connection needs; `None` for a plain-HTTP server.
#[derive(Clone)]
pub struct TlsParts {
    pub config: Arc<ClientConfig>,
    pub server_name: ServerName<'static>,
}

impl fmt::Debug for TlsParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsParts")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// The full chain: TCP, then our TLS when the URL is `https`.
pub fn connector(tls: Option<TlsParts>) -> impl Connector {
    ().chain(TcpConnector::default())
        .chain(KubeTlsConnector { tls })
}

/// Wraps the chained TCP transport in rustls for `https` URLs.
#[derive(Debug)]
pub struct KubeTlsConnector {
    tls: Option<TlsParts>,
}

impl<In: Transport> Connector<In> for KubeTlsConnector {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let Some(tls) = &self.tls else {
            return Err(ureq::Error::Tls(
                "an https URL on a client built without TLS settings",
            ));
        };
        let mut conn = ClientConnection::new(tls.config.clone(), tls.server_name.clone())?;
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        sock.set_timeout(details.timeout);
        conn.complete_io(&mut sock)?;
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(TlsTransport {
            buffers,
            stream: StreamOwned { conn, sock },
        })))
    }
}

/// A rustls stream over the chained transport, as ureq's `RustlsTransport`.
pub struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsTransport")
            .field("chained", &self.stream.sock.inner())
            .finish()
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        // Passed on unchanged: the TCP transport below applies the
        // per-read/per-write parts (a TLS write may need to read).
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let amount = self.stream.read(input)?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}
