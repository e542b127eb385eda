//! The SPDY/3 header-compression dictionary: 1423 bytes, Adler-32
//! `0xE3C6A7C2`, the zlib preset dictionary of every SPDY/3 header block.
//!
//! Upstream: moby/spdystream `spdy/dictionary.go` `headerDictionary` (the
//! SPDY/3 draft's dictionary, as Go's old `go.net/spdy` had it). These bytes
//! were taken from a kubectl binary and checked against the length and the
//! Adler-32 above (the unit test `dictionary_is_spdy3` in `frame_tests.rs`
//! checks both).

/// The dictionary's bytes.
pub const DICTIONARY: &[u8; 1423] =
    b"\x00\x00\x00\x07options\x00\x00\x00\x04head\x00\x00\x00\x04post\x00\
    \x00\x00\x03put\x00\x00\x00\x06delete\x00\x00\x00\x05trace\x00\x00\
    \x00\x06accept\x00\x00\x00\x0eaccept-charset\x00\x00\x00\x0faccept-e\
    ncoding\x00\x00\x00\x0faccept-language\x00\x00\x00\x0daccept-ranges\
    \x00\x00\x00\x03age\x00\x00\x00\x05allow\x00\x00\x00\x0dauthorizatio\
    n\x00\x00\x00\x0dcache-control\x00\x00\x00\x0aconnection\x00\x00\x00\
    \x0ccontent-base\x00\x00\x00\x10content-encoding\x00\x00\x00\x10cont\
    ent-language\x00\x00\x00\x0econtent-length\x00\x00\x00\x10content-lo\
    cation\x00\x00\x00\x0bcontent-md5\x00\x00\x00\x0dcontent-range\x00\
    \x00\x00\x0ccontent-type\x00\x00\x00\x04date\x00\x00\x00\x04etag\x00\
    \x00\x00\x06expect\x00\x00\x00\x07expires\x00\x00\x00\x04from\x00\
    \x00\x00\x04host\x00\x00\x00\x08if-match\x00\x00\x00\x11if-modified-\
    since\x00\x00\x00\x0dif-none-match\x00\x00\x00\x08if-range\x00\x00\
    \x00\x13if-unmodified-since\x00\x00\x00\x0dlast-modified\x00\x00\x00\
    \x08location\x00\x00\x00\x0cmax-forwards\x00\x00\x00\x06pragma\x00\
    \x00\x00\x12proxy-authenticate\x00\x00\x00\x13proxy-authorization\
    \x00\x00\x00\x05range\x00\x00\x00\x07referer\x00\x00\x00\x0bretry-af\
    ter\x00\x00\x00\x06server\x00\x00\x00\x02te\x00\x00\x00\x07trailer\
    \x00\x00\x00\x11transfer-encoding\x00\x00\x00\x07upgrade\x00\x00\x00\
    \x0auser-agent\x00\x00\x00\x04vary\x00\x00\x00\x03via\x00\x00\x00\
    \x07warning\x00\x00\x00\x10www-authenticate\x00\x00\x00\x06method\
    \x00\x00\x00\x03get\x00\x00\x00\x06status\x00\x00\x00\x06200\x20OK\
    \x00\x00\x00\x07version\x00\x00\x00\x08HTTP/1.1\x00\x00\x00\x03url\
    \x00\x00\x00\x06public\x00\x00\x00\x0aset-cookie\x00\x00\x00\x0akeep\
    -alive\x00\x00\x00\x06origin1001012012022052063003023033043053063074\
    02405406407408409410411412413414415416417502504505203\x20Non-Authori\
    tative\x20Information204\x20No\x20Content301\x20Moved\x20Permanently\
    400\x20Bad\x20Request401\x20Unauthorized403\x20Forbidden404\x20Not\
    \x20Found500\x20Internal\x20Server\x20Error501\x20Not\x20Implemented\
    503\x20Service\x20UnavailableJan\x20Feb\x20Mar\x20Apr\x20May\x20Jun\
    \x20Jul\x20Aug\x20Sept\x20Oct\x20Nov\x20Dec\x2000:00:00\x20Mon,\x20T\
    ue,\x20Wed,\x20Thu,\x20Fri,\x20Sat,\x20Sun,\x20GMTchunked,text/html,\
    image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,\
    text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdchcha\
    rset=utf-8charset=iso-8859-1,utf-,*,enq=0.";

/// Adler-32 of [`DICTIONARY`]: the DICTID of a zlib header that uses it.
pub const DICTIONARY_ADLER32: u32 = 0xE3C6_A7C2;
