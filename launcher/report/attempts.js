// ranktime report, an elastic job's attempts (data.attempts, from launcher/attempts.cc) on one
// time axis. Put before report.js in the page's one script, which calls it with its helpers; host
// names and restart reasons are untrusted and only ever become text.
function drawAttempts(data, h) {
  'use strict';
  const a = data.attempts;
  const attempts = a.attempts, restarts = a.restarts;
  const out = h.section('attempts', 'Attempts of the elastic job');
  out.appendChild(h.el('p', {class: 'note'}, 'Each attempt of the job on the first one\'s ' +
      'clock, from its start to its last event: grey until its first step, orange after its last commit (the ' +
      'work the next attempt redid), red the restart (the last event to the next attempt\'s ' +
      'first step). The figures further down are attempt ' +
      attempts[attempts.length - 1].attempt + '\'s, the last.'));
  const lines = h.el('div', {id: 'restart-lines'});
  for (const line of a.lines) lines.appendChild(h.el('p', {}, line));
  out.appendChild(lines);

  const seconds = (s) => s.toFixed(2) + ' s';
  let end = 0;
  for (const at of attempts) end = Math.max(end, at.end_s);
  const left = 90, width = 760, rowH = 30, top = 8;
  const x = (s) => left + (end > 0 ? s / end * width : 0);
  const chart = h.svg('svg', {width: left + width + 24, height: top + attempts.length * rowH + 24,
                              id: 'attempts-chart', role: 'img',
                              'aria-label': attempts.length + ' attempts on one time axis'});
  const bar = (cls, from, to, y, fill, i) => chart.appendChild(h.svg('rect', {
    class: cls, x: x(from), y: y, width: Math.max(1, x(to) - x(from)), height: 16, fill: fill,
    'data-i': i}));
  attempts.forEach((at, i) => {
    const y = top + i * rowH;
    chart.appendChild(h.svg('text', {x: 4, y: y + 13, class: 'axis'}, 'attempt ' + at.attempt));
    bar('attempt', at.start_s, at.end_s, y, '#2e6fb7', i);
    if (at.first_step_s >= 0) bar('attempt starting', at.start_s, at.first_step_s, y, '#b8c4d0', i);
    const restart = restarts[i];  // the restart after this attempt
    if (restart && restart.redone_s !== null) {
      bar('attempt redone', at.end_s - restart.redone_s, at.end_s, y, '#f1a340', i);
    }
    if (restart) {
      bar('restart', restart.lost_at_s, restart.lost_at_s + restart.took_s, y + rowH, '#c0392b',
          i);
    }
  });
  chart.appendChild(h.svg('text', {x: left, y: top + attempts.length * rowH + 16, class: 'axis'},
                          '0 s'));
  chart.appendChild(h.svg('text', {x: left + width - 40, y: top + attempts.length * rowH + 16,
                                   class: 'axis'}, seconds(end)));
  h.hover(chart, (target) => {
    if (!target.classList) return null;
    const i = Number(target.getAttribute('data-i'));
    const at = attempts[i], restart = restarts[i];
    if (target.classList.contains('restart')) {
      return 'restart ' + (i + 1) + ' (attempt ' + restart.before + ' \u2192 ' + restart.after +
             ') took ' + seconds(restart.took_s) + '\nreason: ' + restart.reason;
    }
    if (!target.classList.contains('attempt')) return null;
    let text = 'attempt ' + at.attempt + ': ' + seconds(at.start_s) + ' to ' +
               seconds(at.end_s) + '\nhosts: ' + at.hosts.join(', ');
    if (at.restart_reason) text += '\nbegan after: ' + at.restart_reason;
    if (restart && restart.lost_hosts.length) text += '\nlost: ' + restart.lost_hosts.join(', ');
    if (restart && restart.redone_s !== null) {
      text += '\nredone: ' + restart.steps_redone + ' steps, ' + seconds(restart.redone_s) +
              ' since the last commit';
    }
    return text;
  });
  out.appendChild(h.el('div', {class: 'scroll'}, chart));
  out.appendChild(h.table(a.table));
  return out;
}
