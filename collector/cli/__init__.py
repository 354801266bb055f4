"""The verbs: ``drivelab <verb>`` parses its arguments, calls one service, prints.

:mod:`collector.cli.main` builds the command line (the console script is its
``main``); every verb is one module here (``runcmd``, ``reportcmd``, ``gathercmd``,
``transfercmd``, ``statuscmd``, ``labcmd``, ``checkcmd``, ``watchcmd``), and the
flags more than one verb takes are in :mod:`collector.cli.options`. No verb imports
another verb.
"""
