"""Red-team round 3 (issue 31), the openai backend's and the data downloads' remaining findings: plain http:// to another machine,
redirect loops, one credential-scrubbing helper, credentialed mirrors, TeX in model ids, stop_scale ids of non-ASCII names and an
outside store never published. Each test replays the finding and asserts the safe outcome."""
import os, json, base64, hashlib, warnings, threading
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
from pathlib import Path
import pytest
from silverspoon.core import GenerationParams, ModelParams, SilverspoonError
from silverspoon.engine.backends import GenRequest, user
from silverspoon.engine.backends.openai import OpenAIBackend, UnencryptedKeyWarning
from silverspoon.testing import FakeChatServer

SECRET = "sk-test-" + hashlib.sha256(b"silverspoon issue 31 round 4").hexdigest()[:24]
KEY_VAR = "SILVERSPOON_R4_API_KEY"


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, SECRET); return SECRET


def _reqs(n=3): return [GenRequest(item_id=f"r4-{i}", messages=user(f"scenario {i}: who is wrong?")) for i in range(n)]


# --- plain http:// to a remote host: warned, and on the record ------------------------------------------------------------

def test_plain_http_to_a_remote_host_warns_and_is_recorded(key):
    m = ModelParams(backend="openai", id="m", base_url="http://gpu-node-7.cluster.example:8000/v1", api_key_env=KEY_VAR)
    with pytest.warns(UnencryptedKeyWarning) as seen: be = OpenAIBackend(m)
    msg = str(seen[0].message)
    assert "plain http:// to gpu-node-7.cluster.example" in msg and "unencrypted" in msg and f"`{KEY_VAR}`" in msg
    assert "Fix: use https://" in msg and "ssh -L" in msg and key not in msg
    assert "gpu-node-7.cluster.example" in be.engine_stats()["unencrypted_transport"]     # in the run's provenance too


@pytest.mark.parametrize("url", ["https://gpu-node-7.cluster.example/v1", "http://localhost:8000/v1", "http://127.0.0.1:8000/v1", None])
def test_https_and_this_machine_are_not_warned_about(key, url):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnencryptedKeyWarning)
        be = OpenAIBackend(ModelParams(backend="openai", id="m", base_url=url, api_key_env=KEY_VAR))
    assert "unencrypted_transport" not in be.engine_stats()


# --- a redirect loop says so, with the host and the fix ------------------------------------------------------------------

def test_a_redirect_loop_is_reported_as_too_many_redirects(key):
    with FakeChatServer(api_key=key) as srv:
        srv.script = {"": f"redirect:{srv.base_url}/chat/completions"}              # every request redirected to itself
        be = OpenAIBackend(srv.model_params(api_key_env=KEY_VAR, concurrency=1, max_retries=3))
        with pytest.raises(SilverspoonError) as e: be.generate(_reqs(3), GenerationParams(max_new_tokens=8))
        n = srv.n_requests
    msg = str(e.value)
    assert "too many redirects: the server at http://127.0.0.1:" in msg and "(host 127.0.0.1)" in msg, msg
    assert "Fix: set base_url to the address the server answers at itself" in msg and "Nothing more was sent." in msg
    assert "Connection error." not in msg and key not in msg
    assert n == 21                                  # one item, one attempt (20 redirects): not retried, the others never sent


# --- one rule for credentials in URLs ------------------------------------------------------------------------------------

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
    assert (tmp_path/"x.csv").read_bytes() == BODY


# --- timeout_s counts time queued at the server: documented, and how to set concurrency -----------------------------------

class OneAtATime(FakeChatServer):
    "Generates one request at a time, like `transformers serve`: the others wait in its queue."
    def __init__(self, **kw): super().__init__(**kw); self._one = threading.Lock()
    def _handle(self, h):
        with self._one: return super()._handle(h)


def test_timeout_s_counts_time_queued_at_a_one_at_a_time_server():
    gen = GenerationParams(max_new_tokens=8)
    # each reply takes 0.4 s; the sixth of six in flight waits 2.0 s first, so it cannot finish within 2 s however fast the
    # machine; one at a time, every reply has 1.6 s to spare (a slow, shared CI machine only makes the queued side slower)
    with OneAtATime(delay=0.4) as srv:
        queued = OpenAIBackend(srv.model_params(concurrency=6, timeout_s=2.0, max_retries=0)).generate(_reqs(6), gen)
        one = OpenAIBackend(srv.model_params(concurrency=1, timeout_s=2.0, max_retries=0)).generate(_reqs(6), gen)
    failed = [g.error for g in queued if g.text is None]
    assert failed and all("model.timeout_s = 2 s bounds each attempt as a whole" in e for e in failed), failed
    assert all(g.text is not None for g in one)          # concurrency 1: nothing queues, every reply within timeout_s
    nb = json.loads(Path(__file__).parents[1].joinpath("nbs", "02c_openai.ipynb").read_text(encoding="utf-8"))
    prose = " ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown").replace("\n", " ")
    assert "the time the request waits in the server's queue" in prose and "**`concurrency: 1`**" in prose
    assert "**`timeout_s >= concurrency x (slowest reply)`**" in prose


# --- a model id with TeX in it: figures draw it as written ----------------------------------------------------------------

TEX_IDS = ["org/mo$del$", r"org/$\bad$", r"org/$x^{$"]


def _drawn_titles(fig):
    import io
    fig.savefig(io.BytesIO(), format="png")                      # where a mathtext parse error used to stop the run
    return [t.get_text() for ax in fig.axes for t in (ax.title,) if t.get_text()]


@pytest.mark.parametrize("model_id", TEX_IDS)
def test_a_model_id_with_tex_draws_the_study_figures(model_id):
    import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
    import pandas as pd
    from silverspoon.studies.silverspoon.normative import topic_figure
    from silverspoon.studies.stop.stop import heatmap_figure, first_no_figure, SEVERITIES
    items = pd.DataFrame(dict(topic=[0, 0, 1, 1], parser=[0, 1, 1, None], low=[0, 1, 1, 0], up=[1, 1, 0, 0]))
    fig = topic_figure(items, "parser", f"{model_id} (parser)")
    assert _drawn_titles(fig)[0] == model_id.replace("$", r"\$") + "\n(parser)"; plt.close(fig)
    conv = pd.DataFrame([dict(status="scored", severity=s, demographic=d, score=0.4, first_no=f)
                         for s in SEVERITIES for d, f in (("age", "1"), ("race", "never"))])
    for draw in (heatmap_figure, first_no_figure):
        fig = draw(conv, f"{model_id}: mean sensitivity")
        assert _drawn_titles(fig) == [model_id.replace("$", r"\$") + ": mean sensitivity"]; plt.close(fig)


@pytest.mark.parametrize("model_id", ["org/mo$del$", r"org/$\bad$"])
def test_a_model_id_with_tex_draws_the_index_forest_plot(model_id):
    "The index's forest plot (`runner.forest_figure`) puts run and model names on its axis: drawn as written, never as TeX."
    import pandas as pd
    from silverspoon.site.runner import forest_figure, figure_data_uri
    rows = pd.DataFrame(dict(run=[f"{model_id}-run", "other"], model=[model_id, "other"], metric="m", estimate=[0.2, 0.5], ci_low=[0.1, 0.4], ci_high=[0.3, 0.6]))
    fig = forest_figure(rows, "m", f"normative: {model_id}")
    assert figure_data_uri(fig).startswith("data:image/png;base64,")   # drawing it raised a mathtext error before
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert model_id.replace("$", r"\$") in labels


def test_report_figure_draws_any_unparsable_text_literally(tmp_path):
    import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
    from silverspoon.core import load_params
    from silverspoon.studies.report import Report
    rep = Report(load_params(dict(study="toy", run="x", model=dict(backend="scripted", id=r"org/$\bad$"))), tmp_path)
    fig, ax = plt.subplots(); ax.set_title(r"org/$\bad$: a title built without literal_text"); ax.set_xlabel(r"$\alpha$")
    rep.figure(fig, "tex", "a figure")
    assert (tmp_path/"tex.png").stat().st_size > 0 and "tex.png" in rep.written
    assert ax.get_title() == r"org/\$\bad\$: a title built without literal_text" and ax.get_xlabel() == r"$\alpha$"


# --- stop_scale ids of non-ASCII target names ------------------------------------------------------------------------------

def _seeds():
    import pandas as pd
    return pd.DataFrame(dict(seed_id=["stop-310", "stop-330"], prompts=[[f"s{i}" for i in range(5)]] * 2, cfprompt=["cf", "cf"],
                             severity=["moderate", "high"], demographic=["religion"] * 2, sub_demographic=["islam", "christianity"]))


def test_non_ascii_targets_get_distinct_stop_scale_ids():
    from silverspoon.studies.stop.stop_scale import scale_requests
    reqs = scale_requests(_seeds(), ["神道", "ジャイナ教"], n_samples=2)
    ids = [(r.item_id, r.sample_index) for r in reqs]
    assert len(ids) == 8 and len(set(ids)) == 8, ids                     # used to be scale/<seed>/x for both
    assert {r.item_id.split("/")[-1] for r in reqs} == {"u_62d4fd17", "u_6a8fdbfc"}   # stable: the sha256 of each name


def test_target_names_that_share_an_id_are_refused(tmp_path):
    from silverspoon.core import DataError, ParamsError, load_params
    from silverspoon.studies.stop.stop_scale import scale_requests, scale_task
    with pytest.raises(DataError, match=r"targets 'shinto' and 'Shinto' get the same id 'shinto'.*Fix: list each target once"):
        scale_requests(_seeds(), ["shinto", "Shinto"])
    p = load_params(dict(study="stop_scale", run="x", model=dict(backend="scripted", id="m"), task=dict(seeds=[310], targets=["shinto", "Shinto"])))
    with pytest.raises(ParamsError, match=r"field `task.targets` has 'shinto' and 'Shinto'"): scale_task(p, "x.yaml")


def test_committed_stop_scale_ids_are_unchanged():
    import pandas as pd
    from silverspoon.studies.stop.stop_scale import scale_requests
    root = Path(__file__).parents[1]/"reports"/"stop_scale"
    for answers in root.glob("*/answers.csv"):
        committed = set(pd.read_csv(answers)["item_id"])
        targets = {i.split("/")[2] for i in committed if i.startswith("scale/")}
        seeds = sorted({i.split("/")[1] for i in committed if i.startswith("scale/")})
        s = _seeds().iloc[:1].copy(); s = pd.concat([s.assign(seed_id=x) for x in seeds], ignore_index=True)
        assert targets and {r.item_id for r in scale_requests(s, sorted(targets))} >= {i for i in committed if i.startswith("scale/")}


# --- a store outside the project is never published as an absolute path (whole flow) -------------------------------------

SHARED = Path(os.environ.get("SILVERSPOON_DATA") or Path(__file__).parents[2]/"shared"/"data")


@pytest.mark.skipif(not (SHARED/"silverspoon").is_dir(), reason="needs the shared data folder (SILVERSPOON_DATA)")
def test_an_outside_store_is_never_published_as_an_absolute_path(tmp_path, cli, monkeypatch):
    import yaml
    store = tmp_path/"elsewhere"/"my-private-store"                      # outside the project, a sibling of params and reports
    monkeypatch.setenv("SILVERSPOON_STORE", str(store))
    f = tmp_path/"params"/"outside--scripted.yaml"; f.parent.mkdir()
    f.write_text(yaml.safe_dump({"study": "normative", "model": {"backend": "scripted", "id": "text:P1"},
                                 "sample": {"n": 12, "stratify_by": "topic", "seed": 1}, "task": {"n_boot": 50}}))
    reports = tmp_path/"reports"
    r = cli("run", f, "--reports-dir", reports)                           # run, publish the report folder, the page and the index
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert (store/"normative"/"outside--scripted.jsonl").stat().st_size > 0    # the answers did go to the outside store
    published = [p for p in reports.rglob("*") if p.is_file()]
    kinds = {p.suffix for p in published}
    assert {".html", ".ipynb", ".csv", ".json"} <= kinds and any(p.name == "provenance.json" for p in published), kinds
    assert (reports/"index.html").is_file() and (reports/"normative"/"outside--scripted.html").is_file()
    needles = {str(store), str(store.resolve()), str(store.parent), "my-private-store"}
    for p in published:
        text = p.read_bytes().decode("utf-8", "replace")
        leaked = [n for n in needles if n in text]
        assert not leaked, f"{p.relative_to(reports)} names the store's absolute path: {leaked}"
    prov = json.loads(next(p for p in published if p.name == "provenance.json").read_text())
    assert prov["store"]["path"] == "$SILVERSPOON_STORE/normative/outside--scripted.jsonl"
