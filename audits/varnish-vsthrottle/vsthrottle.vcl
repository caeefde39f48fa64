vcl 4.1;

# vsthrottle's token bucket, keyed by the x-key header: at most 10 requests a second.
import vsthrottle;

backend default none;

sub vcl_recv {
    if (vsthrottle.is_denied(req.http.x-key, 10, 1s)) {
        return (synth(429, "Too Many Requests"));
    }
    return (synth(200, "OK"));
}
