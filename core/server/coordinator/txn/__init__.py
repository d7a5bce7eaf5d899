"""The transaction coordinator: producer ids, transaction state
kept in __transaction_state, and the markers it writes.
"""
