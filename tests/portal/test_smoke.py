"""The project boots and answers its probes."""


def test_it_answers_healthz(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
