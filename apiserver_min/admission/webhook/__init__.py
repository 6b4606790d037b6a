"""Admission webhooks: the MutatingAdmissionWebhook and ValidatingAdmissionWebhook
plugins and what they share with ImagePolicyWebhook.

- ``source.py``: the current webhook configurations, kept from the watch cache;
- ``matching.py``: which webhooks a request matches (rules, selectors);
- ``client.py``: the HTTPS calls (TLS, credentials, service endpoints, timeouts);
- ``review.py``: the AdmissionReview request and the checks of its answer;
- ``dispatcher.py``: the two plugins (mutating in order, validating at once);
- ``credentials.py``: the credentials file (``kubeConfigFile``) the server presents;
- ``metrics.py``: per-webhook call counts, rejections and latencies.
"""
