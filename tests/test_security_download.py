"""Attacks on the data downloads (red-team round 3, issue 31): credentials in URLs hidden by the core rule, credentialed mirrors
(basic auth, a wrong login never printed, the login never sent to another server on a redirect)."""
import base64, hashlib, threading
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
import pytest


# ----------------------------------------------------------------------------------------------------
# Credentials in download URLs and mirrors (was tests/test_security_round3_http2.py, lines 61-150)
URL_CASES = ["see http://a:b@h/x and file:///tmp/x", "//u:p@mirror/gh", "https://reader:pa?ss#1@mirror.example.org/gh",
             "mail me@example.org, https://example.org/a@b", "'HTTPS://U:P@H/'", "git+ssh://git:tok3n@host/repo"]


@pytest.mark.parametrize("text", URL_CASES)
def test_the_data_downloads_hide_url_credentials_by_the_core_rule(text, monkeypatch):
    from silverspoon.core import hide_url_credentials
    from silverspoon.engine.data import hide_credentials
    monkeypatch.delenv("SILVERSPOON_MIRROR", raising=False)
    assert hide_credentials(text) == hide_url_credentials(text)


def test_a_password_with_a_question_mark_is_hidden(monkeypatch):
    from silverspoon.engine.data import hide_credentials
    mirror = "https://reader:pa?ss-0123@mirror.example.org/gh"       # the old data rule stopped at `?` and printed the password
    monkeypatch.setenv("SILVERSPOON_MIRROR", mirror)
    out = hide_credentials(f"download from {mirror}/o/r/c/x.csv failed; user reader, password pa?ss-0123")
    assert "pa?ss-0123" not in out and "reader" not in out and "https://***@mirror.example.org/gh/o/r/c/x.csv" in out, out


# --- a mirror that needs a login: Basic auth, to that server only ---------------------------------------------------------

class _Recording(BaseHTTPRequestHandler):
    "Serves `files` (path -> bytes) when the Basic login matches `login` (None: no login needed); `redirect` maps a path to a URL."
    def log_message(self, *a): pass
    def do_GET(self):
        srv = self.server
        with srv.lock: srv.seen.append((self.path, self.headers.get("Authorization")))
        if self.path in srv.redirect:
            self.send_response(302); self.send_header("Location", srv.redirect[self.path]); self.end_headers(); return
        want = None if srv.login is None else "Basic " + base64.b64encode(srv.login.encode()).decode()
        if want is not None and self.headers.get("Authorization") != want:
            self.send_response(401); self.send_header("WWW-Authenticate", 'Basic realm="mirror"'); self.end_headers(); return
        body = srv.files.get(self.path)
        if body is None: self.send_response(404); self.end_headers(); return
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)


class _Server:
    def __init__(self, login=None, files=None, redirect=None):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recording)
        self.httpd.login, self.httpd.files, self.httpd.redirect = login, dict(files or {}), dict(redirect or {})
        self.httpd.seen, self.httpd.lock = [], threading.Lock()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
    def __enter__(self): threading.Thread(target=self.httpd.serve_forever, daemon=True).start(); return self
    def __exit__(self, *a): self.httpd.shutdown(); self.httpd.server_close()
    @property
    def seen(self): return list(self.httpd.seen)


USER, PASSWORD = "mirror-reader", "hunter2-" + hashlib.sha256(b"mirror r4").hexdigest()[:12]
PUBLIC = "https://raw.githubusercontent.com/o/r/" + "c" * 40 + "/data/x.csv"
BODY = b"id,text\n1,hello\n"


def test_a_credentialed_mirror_downloads_with_basic_auth(tmp_path, monkeypatch, capsys):
    from silverspoon.engine.data import download_url
    path = "/gh/o/r/" + "c" * 40 + "/data/x.csv"
    with _Server(login=f"{USER}:{PASSWORD}", files={path: BODY}) as mirror:
        monkeypatch.setenv("SILVERSPOON_MIRROR", mirror.base.replace("http://", f"http://{USER}:{PASSWORD}@") + "/gh")
        out = download_url(PUBLIC, tmp_path/"x.csv", hashlib.sha256(BODY).hexdigest(), progress=False)
        seen = mirror.seen
    assert out.read_bytes() == BODY
    assert seen == [(path, "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode())]   # the login, not in the path
    printed = capsys.readouterr(); assert PASSWORD not in printed.out + printed.err


def test_a_wrong_mirror_login_fails_without_printing_it(tmp_path, monkeypatch):
    from silverspoon.core import DataError
    from silverspoon.engine.data import download_url
    with _Server(login=f"{USER}:right-password-0") as mirror:
        monkeypatch.setenv("SILVERSPOON_MIRROR", mirror.base.replace("http://", f"http://{USER}:{PASSWORD}@") + "/gh")
        with pytest.raises(DataError) as e: download_url(PUBLIC, tmp_path/"x.csv", hashlib.sha256(BODY).hexdigest(), progress=False)
    msg = str(e.value)
    assert "HTTP Error 401" in msg and "SILVERSPOON_MIRROR" in msg and "http://***@127.0.0.1" in msg, msg
    assert PASSWORD not in msg and USER not in msg and not (tmp_path/"x.csv").exists()


def test_the_mirror_login_is_not_sent_to_another_server_on_a_redirect(tmp_path, monkeypatch):
    from silverspoon.engine.data import download_url
    path = "/gh/o/r/" + "c" * 40 + "/data/x.csv"
    with _Server(files={"/elsewhere.csv": BODY}) as other, \
         _Server(login=f"{USER}:{PASSWORD}", redirect={path: "/same-server.csv", "/same-server.csv": f"{other.base}/elsewhere.csv"}) as mirror:
        monkeypatch.setenv("SILVERSPOON_MIRROR", mirror.base.replace("http://", f"http://{USER}:{PASSWORD}@") + "/gh")
        download_url(PUBLIC, tmp_path/"x.csv", hashlib.sha256(BODY).hexdigest(), progress=False)
        to_mirror, to_other = mirror.seen, other.seen
    auth = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert to_mirror == [(path, auth), ("/same-server.csv", auth)]      # a redirect within the mirror keeps the login
    assert to_other == [("/elsewhere.csv", None)]                        # another server (port) never gets it
