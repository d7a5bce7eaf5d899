"""Security (issue 25): what ``tierlog serve`` needs to let only the right clients in and only
to what they may touch, in Kafka's model and with Kafka's names: listeners and their security
protocols, TLS contexts from Kafka's ``ssl.*`` settings, SASL (PLAIN, SCRAM-SHA-256/512) with
credentials stored salted, and an authorizer with Kafka's ACL semantics.

The room sits below the server (which enforces it on the wire) and above the cluster room
(whose store keeps credentials and ACLs when nodes share one). Nothing here opens a socket.
"""
