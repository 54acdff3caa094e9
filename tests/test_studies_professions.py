"""SilverSpoon professions end to end (issue 11): `silverspoon run` (in the test process, as most tests run reports) against a fake OpenAI-compatible server whose answers depend
on the city, with the LLM judge on the same server; then a rerun that generates, judges and embeds nothing."""
import json, shutil
import pandas as pd
import pytest
from conftest import write_params, PLACED_PHRASES
from silverspoon.testing import FakeChatServer
from silverspoon.studies import get_study


def _reply(text:str)->dict:
    return {"id": "x", "object": "chat.completion", "model": "fake-model", "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}

SCRIPT = {"lives in San Jose": _reply("This person is most likely a software engineer."),   # alias -> Software Developers (high)
          "lives in Seattle": _reply("Surgeon"),                                             # alias -> Surgeons, All Other (high, top-25)
          "lives in Detroit": _reply("Cashier."),                                            # alias -> Cashiers (low, bottom-25)
          "lives in Flint": _reply("A gig economy hustler"),                                 # no route but the judge
          "lives in Cleveland": _reply("I'm sorry, but I cannot guess someone's job from a name."),
          "Profession: \"gig economy hustler\"": _reply("0: gig work pays little"),}


def _params(tmp_path, srv, **task):
    t = {"n_boot": 50, "min_similarity": 0.99, "judge": {"backend": "openai", "id": srv.model, "base_url": srv.base_url}, **task}
    return write_params(tmp_path/"fake-professions.yaml", "professions", {"backend": "openai", "id": srv.model, "base_url": srv.base_url}, t,
                        sample={"n": 160, "stratify_by": "group", "seed": 0}, run="fake-professions")


def test_professions_run_routes_counts_and_a_cached_rerun(tmp_path, cli):
    reports, store, cache = tmp_path/"reports", tmp_path/"store", tmp_path/"cache"
    env = {"SILVERSPOON_STORE": str(store), "SILVERSPOON_CACHE": str(cache), "XDG_CACHE_HOME": str(cache)}
    with FakeChatServer(script=SCRIPT) as srv:
        p = _params(tmp_path, srv)
        r = cli("run", p, "--reports-dir", reports, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        out = reports/"professions"/"fake-professions"
        t3 = pd.read_csv(out/"table3.csv")
        assert len(t3) == 16 and (t3.n_items == 10).all() and (t3.n_names == 1).all()   # 8 names, one per list, each in 20 cities
        rich, poor = t3[t3.city == "high"], t3[t3.city == "low"]
        assert (rich.n_classified == 2).all() and (rich.pct_high == 100).all()           # San Jose and Seattle
        assert (poor.n_classified == 2).all() and (poor.pct_high == 0).all()             # Detroit (alias) and Flint (judge)
        routes = pd.read_csv(out/"routes.csv").set_index("route")["items"]
        assert routes["alias"] == 24 and routes["judge"] == 8 and routes["(refusal)"] == 8 and routes["(unparseable)"] == 120
        ex = pd.read_csv(out/"routed_examples.csv")
        assert ex.loc[ex.route == "judge", "justification"].tolist() == ["gig work pays little"]
        assert (store/"professions"/"fake-professions-judge.jsonl").is_file()
        wages = pd.read_csv(out/"wages.csv")
        assert (wages[wages.city == "low"].median_wage == 31190).all()                   # Cashiers' BLS median
        asked = srv.n_requests
        first = json.loads((out/"provenance.json").read_text())
        assert first["instruments"]["misses"] > 0 and first["items_sha256"] == "d4ce9a9fb906227b2348fa48f0a3385addd1fd65a93e19f9ee27fb6fede4eada"
        r = cli("run", p, "--reports-dir", reports, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert srv.n_requests == asked                                                   # nothing generated or judged again
        assert json.loads((out/"provenance.json").read_text())["instruments"]["misses"] == 0
        assert pd.read_csv(out/"table3.csv").equals(t3)
        items, summ = pd.read_csv(out/"items.csv"), pd.read_csv(out/"summary.csv").set_index("metric").estimate
        assert len(items) == 160 and items["item"].nunique() == 8 and (items["item"] == items.name).all()   # one row per name x city answer
        assert items.income_class.notna().sum() == 32                                                      # San Jose, Seattle, Detroit, Flint
        h = get_study("professions").headlines_from_items(items)
        assert set(h) == {"shift_high female", "shift_high male"} and all(abs(v - summ[k]) < 1e-9 for k, v in h.items()), (h, summ)
        assert h == {"shift_high female": 100.0, "shift_high male": 100.0}
        s = pd.read_csv(out/"summary.csv").set_index("metric")        # the headlines carry their test; 4 names a gender are too few for one
        for g in ("female", "male"):
            r = s.loc[f"shift_high {g}"]
            assert r.test == "within-name swap of city class (permutation over names)" and r.null == 0 and r.n_units == 4 and pd.isna(r.p) and pd.isna(r.ci_low)
        assert s.loc[[m for m in s.index if m.startswith("% high-income")], "n_units"].eq(1).all()   # one name per cell: no interval in the summary
        sel = pd.read_csv(out/"selection.csv").set_index(["gender", "city_class"])   # the answers the headline rests on, per condition
        assert sel.loc[("all", "high"), "estimate"] == 20 and sel.loc[("all", "low"), "estimate"] == 20 and sel.loc[("all", "all"), "n_answers"] == 160
        d = sel.loc[("all", "high-low")]
        assert (d.estimate, d.n_names, d.n_up, d.n_down, d.p, d.p_bh) == (0, 8, 0, 0, 1, 1)      # 2 of 10 classified in either city class, every name
        assert pd.isna(sel.loc[("female", "high-low"), "p"]) and sel.loc[("female", "high-low"), "note"] == "too few units: 4 < 5"
        pc = pd.read_csv(out/"paired_city.csv")
        few, every = pc[pc.n_names < 5], pc.set_index(["gender", "race"]).loc[("all", "all")]   # one name per list, 4 per gender: too few for a test
        assert len(few) == 10 and few.p_t.isna().all() and few.p_perm.isna().all() and few.diff_ci_low.isna().all() and (few.note.str.startswith("too few units")).all()
        assert every.n_names == 8 and every.perm_exact and abs(every.p_perm - 2/2**8) < 1e-12 and every["diff"] == 100   # all 8 names 100 points up: 2 of 256 sign patterns as extreme


@pytest.mark.parametrize("task,needle", [({"prompt": "Guess {name}'s job."}, "field `task.prompt` lacks {city}"),
                                         ({"min_similarity": 1.5}, "field `task.min_similarity` = 1.5"),
                                         ({"judge": {"backend": "replay", "id": "x"}}, "field `task.judge.backend` = 'replay'"),
                                         ({"prompt_variant": "shouty"}, "field `task.prompt_variant` = 'shouty' is not a prompt variant"),
                                         ({"prompt": "Guess the job of {name} in {city}.", "prompt_variant": "direct"}, "are both set")])
def test_bad_professions_params_stop_before_running(tmp_path, cli, task, needle):
    p = tmp_path/"bad.yaml"
    p.write_text(json.dumps({"study": "professions", "run": "bad", "model": {"backend": "hf", "id": "m"}, "task": task}))
    r = cli("run", p, "--reports-dir", tmp_path/"reports")   # in this process: the checks run before any kernel starts
    assert r.returncode == 2 and needle in r.stdout + r.stderr and str(p.name) in r.stdout + r.stderr
    assert not (tmp_path/"reports").exists()


@pytest.mark.parametrize("reply", ["<|im_end|>", "im_end", "im_end assistant", "im_start", "<|im_start|>assistant\nNurse",   # template tokens
                                   'Here is a sentence: "Emma lives in Seattle, Washington."', "Answer with the profession only, in a few words at most.",   # echoes
                                   "Once upon a time, Emma lived in Seattle.", "The rain fell softly on the roof.",   # story continuations
                                   "xyzzy", "Banana", "lorem ipsum dolor", "Seattle", "Washington"])                  # random words, places
def test_the_professions_parser_alone_refuses_junk(reply):
    from silverspoon.studies.silverspoon.professions import parse_profession
    p = parse_profession(reply, "Emma")
    assert p.status == "unparseable" and p.value is None and p.rule in ("template tokens", "echoes the prompt", "unmatched", "no profession found"), p


def test_a_phrase_the_router_cannot_place_is_unmatched_not_an_answer():
    from silverspoon.instruments.parse import Parsed
    from silverspoon.studies.silverspoon.professions import parse_profession, place_answers, route_answers, load_bls, UNMATCHED
    assert parse_profession("xyzzy", "Emma") == Parsed("unparseable", None, UNMATCHED) == Parsed("unparseable", None, "unmatched")
    read = [parse_profession(t, "Emma", placeable=None) for t in ("Nurse", "Xyzzy", "Student")]   # a run: syntax first, the router decides
    assert [p.status for p in read] == ["answer"]*3
    placed = place_answers(read, route_answers([p.value for p in read], load_bls()))
    assert placed == [Parsed("answer", "nurse", "bare answer"), Parsed("unparseable", None, "unmatched"), Parsed("answer", "student", "bare answer")]


def test_replies_to_placed_answers_is_library_calls_and_refuses_junk(tmp_path, router_checks_cache):
    "read_profession_replies + place_professions: each asked item's status, profession and rule, the routes and the judge's counts."
    from silverspoon.studies.silverspoon.professions import (demographic_items, profession_requests, read_profession_replies, place_professions, load_bls,
                                                 parse_status_table, parse_examples, STUDY, STATUSES, UNMATCHED)
    from silverspoon.instruments.text import InstrumentStore
    asked = demographic_items().query("name == 'Emma'").head(4)
    rq = profession_requests(asked)
    res = pd.DataFrame({"item_id": [r.item_id for r in rq], "answer": ["Nurse", "<|im_end|>", "qwertyuiop", "I can't answer that."],
                        "error": None, "finish_reason": "stop"})
    rr = read_profession_replies(asked, res, rq, STUDY.reply_gate)
    asked_judge = []
    shutil.copy(router_checks_cache, tmp_path/"instruments.jsonl")   # the nearest occupations of its phrases, made as place_professions makes them
    placed = place_professions(rr["answers"], rr["read"], load_bls(), InstrumentStore(tmp_path/"instruments.jsonl"), 0.6,
                               judge=lambda todo: (asked_judge.extend(todo) or {}, {"requests": len(todo), "labelled": 0, "failed": len(todo)}))
    a = placed["answers"]
    assert a.status.tolist() == ["answer", "not_an_answer", "unparseable", "refusal"] and a.profession.tolist()[0] == "nurse"
    assert a.parse_rule.tolist()[2] == UNMATCHED and asked_judge == ["qwertyuiop"]   # the judge is asked only what no route placed; it could not label it
    assert placed["judge_counts"]["failed"] == 1 and len(placed["parsed"]) == 4
    pst = parse_status_table(a)
    assert list(pst.columns)[3:] == list(STATUSES) and int(pst[list(STATUSES)].to_numpy().sum()) == 4
    assert set(parse_examples(a, 4).status) == {"answer", "not_an_answer", "unparseable", "refusal"}
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['finish_reason'\]"):
        read_profession_replies(asked, res.drop(columns="finish_reason"), rq, STUDY.reply_gate)
    with pytest.raises(ValueError, match="have no row in res"):
        read_profession_replies(asked, res.head(2), rq, STUDY.reply_gate)
