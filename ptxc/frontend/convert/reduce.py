"""(filled in by the graph dialect work)"""
