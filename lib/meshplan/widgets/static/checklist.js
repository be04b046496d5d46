/*
 * The renderer of kind "checklist" (meshplan.widgets.Checklist): after the button, a summary ("2 of 3 checks
 * pass; failing: ...") and one line per check, each looked up in that check's own table (a key over the controls
 * the check reads, data.checks[i].uses). Moving a control clears the report.
 * Comments before the code (these) are not written into the pages.
 */
(function(MP){if(!MP||MP.kinds["checklist"])return;MP.kinds["checklist"]=function(root,data,ui){
  var out=root.querySelector(".mp-answer"),button=root.querySelector(".mp-check");
  function lines(){return data.checks.map(function(c){var l=c.table[ui.key(c.uses)];return {name:c.name,ok:l[0],reason:l[1]};});}
  function show(){var ls=lines(),fails=ls.filter(function(l){return !l.ok;});out.textContent="";out.className="mp-answer";
    var head=document.createElement("div");head.className="mp-summary "+(fails.length?"mp-fail":"mp-pass");
    head.textContent=(ls.length-fails.length)+" of "+ls.length+" checks pass"+(fails.length?"; failing: "+
      fails.map(function(l){return l.name;}).join(", "):"")+".";out.appendChild(head);
    var ul=document.createElement("ul");ul.className="mp-lines";
    ls.forEach(function(l){var li=document.createElement("li");li.className=l.ok?"mp-pass":"mp-fail";
      li.setAttribute("data-check",l.name);li.textContent=(l.ok?"\u2713 ":"\u2717 ")+l.name+": "+l.reason;ul.appendChild(li);});
    out.appendChild(ul);}
  button.addEventListener("click",show);
  ui.onChange(function(){out.textContent="";});
};})(window.__meshplan);
